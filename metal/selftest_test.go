package metal

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestSelfTestOnFake runs the self-test on the fake device: it must cover
// every kernel and pass, and the report must say so.
func TestSelfTestOnFake(t *testing.T) {
	be := NewFake(DefaultPolicy(DeviceInfo{}))
	vs, err := SelfTest(be, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if !WriteSelfTest(&buf, be.Device(), vs) {
		t.Errorf("self-test failed on the fake device:\n%s", buf.String())
	}
	if want := fmt.Sprintf("%d passed, 0 failed", len(vs)); !strings.Contains(buf.String(), want) {
		t.Errorf("report:\n%s", buf.String())
	}
	t.Logf("\n%s", buf.String())
}

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
