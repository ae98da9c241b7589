package cuda

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteDevices prints GPUs as a table with their recommended beam.
func WriteDevices(w io.Writer, infos []DeviceInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tcompute capability\tSMs\tmemory\tdriver\tbeam (W×L)")
	for _, d := range infos {
		bw, bl := recommendedBeam(d)
		fmt.Fprintf(tw, "%s\t%d.%d\t%d\t%s\tCUDA %d.%d\t%d×%d\n", d.Name, d.Major, d.Minor, d.Multiprocessors,
			gib(d.Memory), d.Driver/1000, d.Driver%1000/10, bw, bl)
	}
	tw.Flush()
}

func gib(n int64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }
