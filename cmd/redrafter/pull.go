package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed9b8f47b1/redrafter/internal/envvar"
	"github.com/seed9b8f47b1/redrafter/internal/hub"
)

// hubCacheDir is the Hugging Face hub cache, where huggingface_hub puts
// it: $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
func hubCacheDir() (string, error) {
	if d := envvar.HFHubCache.Get(); d != "" {
		return d, nil
	}
	if d := envvar.HFHome.Get(); d != "" {
		return filepath.Join(d, "hub"), nil
	}
	if d := envvar.XDGCacheHome.Get(); d != "" {
		return filepath.Join(d, "huggingface", "hub"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no Hugging Face cache: set HF_HUB_CACHE (%w)", err)
	}
	return filepath.Join(home, ".cache", "huggingface", "hub"), nil
}

// offline reads HF_HUB_OFFLINE as huggingface_hub does.
func offline() bool {
	switch strings.ToLower(envvar.HFHubOffline.Get()) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// newHubClient is the client of the user's cache and hub; progress, when
// not nil, shows the downloads.
func newHubClient(progress *progressLine) (*hub.Client, error) {
	cache, err := hubCacheDir()
	if err != nil {
		return nil, err
	}
	c := &hub.Client{Cache: cache, Endpoint: envvar.HFEndpoint.Get(), Token: envvar.HFToken.Get(), Offline: offline()}
	if progress != nil {
		start := time.Now()
		c.Progress = func(p hub.Progress) {
			rate := float64(p.AllDone) / max(time.Since(start).Seconds(), 1e-3)
			line := fmt.Sprintf("%s %s of %s (%d%%), %s/s", progress.what, hub.Size(p.AllDone), hub.Size(p.AllTotal),
				percent(p.AllDone, p.AllTotal), hub.Size(int64(rate)))
			progress.update(p.AllDone == p.AllTotal, line, "file", p.File, "done", hub.Size(p.AllDone), "total", hub.Size(p.AllTotal))
		}
	}
	return c, nil
}

func percent(done, total int64) int64 {
	if total <= 0 {
		return 100
	}
	return 100 * done / total
}

// cmdContext is cmd's context (Ctrl-C cancels it), or a background one.
func cmdContext(cmd *cobra.Command) context.Context {
	if cmd != nil && cmd.Context() != nil {
		return cmd.Context()
	}
	return context.Background()
}

// fromHub returns the local path of a repository name (REPO[:TAG]) given
// as flag, pulling it when the cache does not hold it; ok is false when
// value is not a name (a path that exists, or a path with an error of its
// own), and the caller checks it as a path.
func fromHub(cmd *cobra.Command, flag, value string) (path string, ok bool, err error) {
	if value == "" || exists(value) {
		return value, false, nil
	}
	name, isName := hub.ParseName(value)
	if !isName {
		return value, false, nil
	}
	w := os.Stderr
	if cmd != nil {
		if f, ok := cmd.ErrOrStderr().(*os.File); ok {
			w = f
		}
	}
	pl := newProgressLine(w, "pull "+name.String())
	c, err := newHubClient(pl)
	if err != nil {
		return "", true, fmt.Errorf("%s %s: %w", flag, value, err)
	}
	if _, ferr := c.Find(name, ""); ferr != nil && !c.Offline {
		slog.Info("not in the cache: pulling", "name", name.String(), "cache", c.Cache)
	}
	snap, err := c.Get(cmdContext(cmd), name)
	pl.finish()
	if err != nil {
		return "", true, fmt.Errorf("%s %s: no such file or directory here, and as a Hugging Face repository: %w", flag, value, err)
	}
	return snap.Path(), true, nil
}

// resolveModelPath replaces a repository name in *model with its local
// path (pulling it if needed), then checks the path.
func resolveModelPath(cmd *cobra.Command, flag string, model *string) error {
	p, _, err := fromHub(cmd, flag, *model)
	if err != nil {
		return err
	}
	*model = p
	return checkModelPath(flag, p)
}

// autoDrafter is --drafter auto's choice: a cached head whose config
// declares the model's repository as its base ("" when none does).
const autoDrafter = "auto"

// resolveDrafterPath replaces --drafter's repository name, or auto, with a
// local path, then checks it; auto with no head for model leaves *drafter
// empty (plain decoding) and says so.
func resolveDrafterPath(cmd *cobra.Command, drafter *string, model string) error {
	if *drafter != autoDrafter || exists(*drafter) {
		p, _, err := fromHub(cmd, "--drafter", *drafter)
		if err != nil {
			return err
		}
		*drafter = p
		if p == "" {
			return nil
		}
		return checkDrafterPath(p)
	}
	*drafter = ""
	cache, err := hubCacheDir()
	if err != nil {
		return fmt.Errorf("--drafter auto: %w", err)
	}
	repo, ok := hub.RepoOf(cache, model)
	if !ok {
		slog.Info("--drafter auto: the model is not in the hub cache, so no cached head names it: decoding without ReDrafter", "model", model)
		return nil
	}
	c := &hub.Client{Cache: cache}
	all, err := c.List()
	if err != nil {
		return fmt.Errorf("--drafter auto: reading %s: %w", cache, err)
	}
	heads := hub.HeadsFor(all, repo)
	if len(heads) == 0 {
		slog.Info("--drafter auto: no cached draft head declares this model as its base: decoding without ReDrafter", "model", repo, "cache", cache)
		return nil
	}
	head := heads[0]
	for _, h := range heads {
		if len(h.Refs) > 0 && len(head.Refs) == 0 {
			head = h // a branch's head before an old snapshot's
		}
	}
	slog.Info("--drafter auto: using a cached draft head", "head", head.Repo, "revision", short(head.Commit), "model", repo)
	*drafter = head.Dir
	return checkDrafterPath(head.Dir)
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

func newPullCmd() *cobra.Command {
	var revision string
	cmd := &cobra.Command{
		Use:   "pull REPO[:TAG]",
		Short: "Download a model or draft head from Hugging Face into the shared hub cache",
		Long: `Download a model or a ReDrafter draft head from the Hugging Face Hub (or the
mirror HF_ENDPOINT names) into the hub cache that huggingface_hub, transformers
and mlx-lm share ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub),
and print its local path. TAG picks a GGUF quantization by its name in the file
names (Q4_K_M, Q8_0, F16, …); without one, a GGUF repository gives its only file
(Q4_K_M among several), a checkpoint repository its config, safetensors weights
and tokenizer, a head repository its config and weights. Files the cache holds
are not downloaded again; a download stopped by Ctrl-C or a broken connection
continues where it stopped at the next pull. Every file is checked against the
hub's SHA-256 before it is placed, and nothing is placed where models are read
from until it is whole. HF_TOKEN is sent for gated and private repositories.
With HF_HUB_OFFLINE=1 nothing is downloaded.

The same names work wherever a model or head goes: -m REPO[:TAG], --drafter
REPO; --drafter auto takes a cached head whose config names the model as its
base.`,
		Example: `  redrafter pull bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M
  redrafter pull Qwen/Qwen2.5-0.5B-Instruct
  redrafter generate -m bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M -p "Hello"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, ok := hub.ParseName(args[0])
			if !ok {
				return fmt.Errorf("%q is not a repository name: want owner/name or owner/name:TAG", args[0])
			}
			pl := newProgressLine(cmd.ErrOrStderr(), "pull "+name.String())
			c, err := newHubClient(pl)
			if err != nil {
				return err
			}
			start := time.Now()
			snap, err := c.Pull(cmd.Context(), name, revision)
			pl.finish()
			if err != nil {
				return err
			}
			slog.Info("pulled", "name", name.String(), "revision", short(snap.Commit), "files", len(snap.Files),
				"path", snap.Path(), "seconds", fmt.Sprintf("%.1f", time.Since(start).Seconds()))
			_, err = fmt.Fprintln(cmd.OutOrStdout(), snap.Path())
			return err
		},
	}
	cmd.Flags().StringVar(&revision, "revision", hub.DefaultRevision, "branch, tag or commit to pull")
	return cmd
}

func newRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm REPO[:TAG]",
		Short: "Remove a model or draft head from the hub cache",
		Long: `Remove a model or draft head from the hub cache: with a TAG, that
quantization's files from every snapshot; without, every snapshot and ref of
the repository. Blobs no remaining snapshot uses are deleted with them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, ok := hub.ParseName(args[0])
			if !ok {
				return fmt.Errorf("%q is not a repository name: want owner/name or owner/name:TAG", args[0])
			}
			c, err := newHubClient(nil)
			if err != nil {
				return err
			}
			freed, err := c.Remove(name)
			if errors.Is(err, hub.ErrNotCached) {
				return fmt.Errorf("%w (redrafter list shows what the cache holds)", err)
			}
			if err != nil {
				return err
			}
			slog.Info("removed", "name", name.String(), "freed", hub.Size(freed))
			return nil
		},
	}
}
