package deploy

import (
	"bufio"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// serveFlags are the long flags `redrafter serve --help` lists.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	help, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("serve --help: %v\n%s", err, help)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`--([a-z][a-z-]+)`).FindAllStringSubmatch(string(help), -1) {
		flags[m[1]] = true
	}
	return flags
}

// checkServeArgs checks a command line that runs `redrafter serve`: flags
// the binary has, on loopback.
func checkServeArgs(t *testing.T, where string, args []string, flags map[string]bool) {
	t.Helper()
	if len(args) < 2 || args[0] != "/usr/local/bin/redrafter" || args[1] != "serve" {
		t.Fatalf("%s: runs %v, want /usr/local/bin/redrafter serve", where, args)
	}
	for i, a := range args[2:] {
		if name, ok := strings.CutPrefix(a, "--"); ok && !flags[strings.SplitN(name, "=", 2)[0]] {
			t.Errorf("%s: serve has no flag %s", where, a)
		}
		if a == "--host" && args[2+i+1] != "127.0.0.1" {
			t.Errorf("%s: --host %s, want loopback", where, args[2+i+1])
		}
	}
	if !slices.Contains(args, "--host") {
		t.Errorf("%s: no --host 127.0.0.1", where)
	}
}

// systemdKeys are the directives a section of the unit may use (systemd.unit,
// systemd.service, systemd.exec, systemd.kill); a misspelt one is an error.
var systemdKeys = map[string][]string{
	"Unit":    {"Description", "Documentation", "After", "Wants", "Requires"},
	"Service": {"Type", "EnvironmentFile", "Environment", "ExecStartPre", "ExecStart", "KillSignal", "TimeoutStopSec", "TimeoutStartSec", "Restart", "RestartSec", "DynamicUser", "CacheDirectory", "NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp"},
	"Install": {"WantedBy"},
}

// The systemd unit parses as a unit file of known directives, runs
// `redrafter serve` with flags it has, on loopback, stops it with SIGTERM
// with time for the drain, and restarts it only on failure.
func TestSystemdUnit(t *testing.T) {
	f, err := os.Open("../../deploy/systemd/redrafter.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			if systemdKeys[section] == nil {
				t.Errorf("line %d: unknown section %s", n, line)
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || !slices.Contains(systemdKeys[section], k) {
				t.Errorf("line %d: %q is not a known directive of [%s]", n, line, section)
			}
			keys[section+"."+k] = v
		}
	}
	checkServeArgs(t, "ExecStart", strings.Fields(keys["Service.ExecStart"]), serveFlags(t))
	for k, want := range map[string]string{"Service.KillSignal": "SIGTERM", "Service.Restart": "on-failure", "Service.Type": "exec", "Install.WantedBy": "multi-user.target", "Service.Environment": "HF_HUB_CACHE=/var/cache/redrafter/hub", "Service.CacheDirectory": "redrafter"} {
		if keys[k] != want {
			t.Errorf("%s=%q, want %q", k, keys[k], want)
		}
	}
}

// plistValue is one value of a property list, as launchd reads it.
type plistValue struct {
	XMLName xml.Name
	Text    string       `xml:",chardata"`
	Items   []plistValue `xml:",any"`
}

// dict maps a <dict>'s keys to their values.
func (v plistValue) dict(t *testing.T) map[string]plistValue {
	t.Helper()
	if v.XMLName.Local != "dict" || len(v.Items)%2 != 0 {
		t.Fatalf("not a dict: %v", v.XMLName.Local)
	}
	m := map[string]plistValue{}
	for i := 0; i < len(v.Items); i += 2 {
		if v.Items[i].XMLName.Local != "key" {
			t.Fatalf("a dict entry without its key: %v", v.Items[i].XMLName.Local)
		}
		m[v.Items[i].Text] = v.Items[i+1]
	}
	return m
}

// The launchd agent parses as a property list whose keys launchd reads:
// `redrafter serve` with flags it has on loopback, started at login, kept
// alive after a crash but not after a clean stop, given time to drain.
func TestLaunchdAgent(t *testing.T) {
	b, err := os.ReadFile("../../deploy/launchd/com.github.redrafter.serve.plist")
	if err != nil {
		t.Fatal(err)
	}
	var plist struct {
		XMLName xml.Name   `xml:"plist"`
		Version string     `xml:"version,attr"`
		Dict    plistValue `xml:"dict"`
	}
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	dec.Strict = true
	if err := dec.Decode(&plist); err != nil {
		t.Fatal(err)
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if cd, ok := tok.(xml.CharData); err != nil || !ok || strings.TrimSpace(string(cd)) != "" {
			t.Fatalf("more after </plist>: %v %v", tok, err)
		}
	}
	d := plist.Dict.dict(t)
	known := []string{"Label", "ProgramArguments", "EnvironmentVariables", "RunAtLoad", "KeepAlive", "ExitTimeOut", "ProcessType", "StandardErrorPath"}
	for k := range d {
		if !slices.Contains(known, k) {
			t.Errorf("key %q is not one launchd.plist(5) lists here", k)
		}
	}
	if d["Label"].Text != "com.github.redrafter.serve" {
		t.Errorf("Label %q", d["Label"].Text)
	}
	var args []string
	for _, s := range d["ProgramArguments"].Items {
		if s.XMLName.Local != "string" {
			t.Fatalf("ProgramArguments holds a %s", s.XMLName.Local)
		}
		args = append(args, s.Text)
	}
	checkServeArgs(t, "ProgramArguments", args, serveFlags(t))
	if d["RunAtLoad"].XMLName.Local != "true" {
		t.Errorf("RunAtLoad is not true")
	}
	if ka := d["KeepAlive"].dict(t); ka["SuccessfulExit"].XMLName.Local != "false" {
		t.Errorf("KeepAlive.SuccessfulExit is not false")
	}
	if n, err := strconv.Atoi(d["ExitTimeOut"].Text); d["ExitTimeOut"].XMLName.Local != "integer" || err != nil || n <= 10 {
		t.Errorf("ExitTimeOut %q, want more than the 10 s shutdown timeout", d["ExitTimeOut"].Text)
	}
}
