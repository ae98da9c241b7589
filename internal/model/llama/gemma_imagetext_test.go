package llama

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
)

// An image-text Gemma 3 checkpoint, in either of transformers' layouts of
// its text model (language_model.model.* before 4.52,
// model.language_model.* after) and with vision tensors beside it, loads
// its text model: the Config and every logit are those of the same
// weights as a Gemma3ForCausalLM checkpoint, bit for bit, though its
// text_config leaves out what Gemma3TextConfig defaults (the spec's eps
// and bases are those defaults); the vision tensors are named in Ignored.
// A checkpoint with that config but neither layout is refused naming both.
func TestGemma3ImageTextCheckpoint(t *testing.T) {
	ck := writeGemma3(t)
	if gemma3Spec.NormEps != 1e-6 || gemma3Spec.RopeTheta != 1e6 {
		t.Fatal("the spec's eps and base must be Gemma3TextConfig's defaults for this test")
	}
	tokens := []int32{3, 17, 5, 63, 0, 22, 8, 41, 9, 30, 2, 12}
	want := logitsOfTokens(t, ck.HF, cpu.NewReference(), tokens)
	plain, err := Open(ck.HF)
	if err != nil {
		t.Fatal(err)
	}
	wantCfg := plain.Model.Config
	plain.Close()
	for _, newNames := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "it")
		if err := llamatest.WriteGemma3ImageText(ck, dir, newNames); err != nil {
			t.Fatal(err)
		}
		text, other := "language_model.model.", ""
		if newNames {
			text, other = "model.language_model.", "model."
		}
		raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{`"rms_norm_eps"`, `"rope_theta"`, `"rope_local_base_freq"`, `"hidden_activation"`, `"sliding_window_pattern"`} {
			if strings.Contains(string(raw), k) {
				t.Fatalf("the image-text config.json states %s", k)
			}
		}
		got, err := Open(dir)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		cfg, ignored := got.Model.Config, got.Ignored
		got.Close()
		if !reflect.DeepEqual(cfg, wantCfg) {
			t.Errorf("%s: config\n%+v\nwant\n%+v", text, cfg, wantCfg)
		}
		for _, w := range []string{text + "*", other + "vision_tower.* (2)", other + "multi_modal_projector.* (2)"} {
			if !strings.Contains(ignored, w) {
				t.Errorf("%s: Ignored %q does not name %s", text, ignored, w)
			}
		}
		logits := logitsOfTokens(t, dir, cpu.NewReference(), tokens)
		if !slices.Equal(logits, want) {
			t.Errorf("%s: logits differ from the Gemma3ForCausalLM checkpoint's (max rel %g)", text, maxRel(logits, want))
		}
		if newNames {
			continue
		}
		// The image-text config over the text-only checkpoint's names.
		st, err := formats.OpenSafetensorsDir(ck.HF)
		if err != nil {
			t.Fatal(err)
		}
		var ts []formats.Tensor
		for _, tn := range st.Tensors {
			ts = append(ts, *tn)
		}
		writeST(t, filepath.Join(dir, "model.safetensors"), ts)
		st.Close()
		if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "neither language_model.model.embed_tokens.weight nor model.language_model.embed_tokens.weight") {
			t.Errorf("an image-text config over a text-only checkpoint: %v", err)
		}
	}
}
