package main

import (
	"path/filepath"
	"testing"
)

// The cache is where huggingface_hub looks (constants.py: HF_HUB_CACHE,
// else HF_HOME/hub, HF_HOME defaulting to $XDG_CACHE_HOME/huggingface, then
// ~/.cache/huggingface).
func TestHubCacheDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, c := range []struct {
		cache, hfHome, xdg string
		want               string
	}{
		{"/c", "/h", "/x", "/c"},
		{"", "/h", "/x", filepath.Join("/h", "hub")},
		{"", "", "/x", filepath.Join("/x", "huggingface", "hub")},
		{"", "", "", filepath.Join(home, ".cache", "huggingface", "hub")},
	} {
		t.Setenv("HF_HUB_CACHE", c.cache)
		t.Setenv("HF_HOME", c.hfHome)
		t.Setenv("XDG_CACHE_HOME", c.xdg)
		if got, err := hubCacheDir(); err != nil || got != c.want {
			t.Errorf("HF_HUB_CACHE=%q HF_HOME=%q XDG_CACHE_HOME=%q: %q, %v; want %q", c.cache, c.hfHome, c.xdg, got, err, c.want)
		}
	}
	for v, want := range map[string]bool{"1": true, "true": true, "YES": true, "On": true, "": false, "0": false, "false": false} {
		t.Setenv("HF_HUB_OFFLINE", v)
		if offline() != want {
			t.Errorf("HF_HUB_OFFLINE=%q: offline() = %v", v, !want)
		}
	}
}
