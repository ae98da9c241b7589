package metal

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"

	core "github.com/seed9b8f47b1/redrafter/internal/backend/emu"

	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/emu"
)

func TestMain(m *testing.M) { os.Exit(core.Main(m)) }

// NewEmulatorForTest is metaltest.NewEmulator (its Exec and Ran), set by
// metaltest_test.go before the tests run: this package's own tests cannot
// import metaltest, which imports metal, so the external test package
// hands the one executor of emulated kernels in.
var NewEmulatorForTest func(tb testing.TB, override map[string]string, contract emu.Contract, orders []core.Order) (exec func(*Dispatch) error, ran func() map[string]int)

// emuMode is how the emulator compiles and runs the kernels: FMA
// contraction, and thread orders (nil: core.DefaultOrders, forward, reverse
// and random, with results required to agree bit for bit).
type emuMode struct {
	contract emu.Contract
	orders   []core.Order
}

func (m emuMode) String() string {
	if m.orders == nil {
		return m.contract.String()
	}
	return fmt.Sprintf("%v/orders%v", m.contract, m.orders)
}

// emuExec reports the kernels an emulated backend has run.
type emuExec struct{ ran func() map[string]int }

// executed counts the kernels run through the emulator in this test binary.
var executed = struct {
	sync.Mutex
	ran map[string]int
}{ran: map[string]int{}}

// newEmuBackend returns a backend over the fake device whose dispatches run
// through the emulated kernels (override: .metal file → source, for planted
// bugs), under the fake device's default policy.
func newEmuBackend(tb testing.TB, override map[string]string) (*Backend, *emuExec) {
	tb.Helper()
	return newEmuBackendMode(tb, override, emuMode{})
}

// newEmuBackendMode is newEmuBackend with the emulator in mode m.
func newEmuBackendMode(tb testing.TB, override map[string]string, m emuMode) (*Backend, *emuExec) {
	tb.Helper()
	exec, ran := NewEmulatorForTest(tb, override, m.contract, m.orders)
	dev := newFakeDevice(Fake{Exec: func(d *Dispatch) error {
		if err := exec(d); err != nil {
			return err
		}
		executed.Lock()
		executed.ran[d.Kernel]++
		executed.Unlock()
		return nil
	}})
	return newBackend(dev, DefaultPolicy(dev.info())), &emuExec{ran}
}

func (x *emuExec) names() []string {
	var ns []string
	for n := range x.ran() {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

func (x *emuExec) String() string { return fmt.Sprint(x.names()) }
