package metal

import (
	"bytes"
	"strings"
	"testing"
)

func TestDevicesWithoutMetal(t *testing.T) {
	rs, err := Devices()
	if err == nil {
		var buf bytes.Buffer
		WriteDevices(&buf, rs)
		t.Logf("\n%s", buf.String())
		return
	}
	if !strings.Contains(err.Error(), "not available") {
		t.Errorf("Devices() error %v, want one saying Metal is not available", err)
	}
	if _, err := Open(); err == nil || !strings.Contains(err.Error(), "not available") {
		t.Errorf("Open() error %v", err)
	}
}

// TestWriteDevices checks the table a Mac user sends back: one row per GPU
// with its cores ("unknown" when the system does not say) and its beam.
func TestWriteDevices(t *testing.T) {
	infos := []DeviceInfo{
		{Name: "Apple M2 Max", Architecture: "applegpu_g14s", Family: "Apple8", UnifiedMemory: true,
			WorkingSet: 48 << 30, MaxBuffer: 24 << 30, Cores: 38},
		{Name: "Apple M1", Family: "Apple7", UnifiedMemory: true, WorkingSet: 11 << 30, MaxBuffer: 8 << 30},
	}
	var rs []DeviceReport
	for _, inf := range infos {
		rs = append(rs, DeviceReport{DeviceInfo: inf, Beam: RecommendedBeam(inf), Policy: DefaultPolicy(inf)})
	}
	var buf bytes.Buffer
	WriteDevices(&buf, rs)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "cores") {
		t.Fatalf("table:\n%s", buf.String())
	}
	for i, want := range [][]string{
		{"Apple M2 Max", "applegpu_g14s", "Apple8", "38", "48 GiB", "24 GiB", "2×4", "50"},
		{"Apple M1", "unknown", "Apple7", "unknown", "11 GiB", "8 GiB", "1×4", "40"},
	} {
		if got := strings.Fields(lines[i+1]); !slicesContainAll(got, want) {
			t.Errorf("row %d = %q, want fields %q", i, lines[i+1], want)
		}
	}
}

func slicesContainAll(have, want []string) bool {
	joined := " " + strings.Join(have, " ") + " "
	for _, w := range want {
		if !strings.Contains(joined, " "+w+" ") {
			return false
		}
	}
	return true
}
