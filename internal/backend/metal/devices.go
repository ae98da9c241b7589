package metal

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// DeviceReport is one GPU as `redrafter devices` lists it.
type DeviceReport struct {
	DeviceInfo
	Beam   BeamShape
	Policy Policy
}

// Devices lists the system's GPUs with their recommended beam shape and
// command-buffer policy. Without Metal it returns the reason.
func Devices() ([]DeviceReport, error) {
	infos, err := listDevices()
	if err != nil {
		return nil, err
	}
	var rs []DeviceReport
	for _, inf := range infos {
		rs = append(rs, DeviceReport{DeviceInfo: inf, Beam: RecommendedBeam(inf), Policy: DefaultPolicy(inf)})
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
	return rs, nil
}

// WriteDevices prints device reports as a table.
func WriteDevices(w io.Writer, rs []DeviceReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tarchitecture\tfamily\tcores\tunified\tworking set\tmax buffer\tbeam (W×L)\tops/buffer")
	for _, r := range rs {
		cores := "unknown"
		if r.Cores > 0 {
			cores = strconv.Itoa(r.Cores)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\t%s\t%d×%d\t%d\n", r.Name, orUnknown(r.Architecture), orUnknown(r.Family),
			cores, r.UnifiedMemory, gib(r.WorkingSet), gib(r.MaxBuffer), r.Beam.Width, r.Beam.Length, r.Policy.OpsPerBuffer)
	}
	tw.Flush()
}

func gib(n uint64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/(1<<30)), ".0") + " GiB"
}
