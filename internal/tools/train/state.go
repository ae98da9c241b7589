package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// StateFile holds everything a resumed run needs (the weights, AdamW's
// moments, the step and the settings), in one file written atomically next
// to the head's config.json and model.safetensors.
const StateFile = "training_state.safetensors"

// state is a training checkpoint.
type state struct {
	Step    int
	Options stateOptions
	Params  *Params
	M, V    *Params
}

// stateOptions are the settings a resumed run must share with the saved
// one: the head's shape, the schedule, the data order and the data.
type stateOptions struct {
	Config      drafter.Config `json:"config"`
	Steps       int            `json:"steps"`
	Batch       int            `json:"batch"`
	Predict     int            `json:"predict"`
	LR          float64        `json:"lr"`
	Warmup      float64        `json:"warmup"`
	WeightDecay float64        `json:"weight_decay"`
	Clip        float64        `json:"clip"`
	KLWeight    float64        `json:"kl_weight"`
	Seed        uint64         `json:"seed"`
	TrainSeqs   int            `json:"train_sequences"`
	TrainTokens int            `json:"train_tokens"`
	Init        string         `json:"init,omitempty"`
}

// diff names the settings that differ, as "name saved (now current)".
func (s stateOptions) diff(now stateOptions) string {
	var d []string
	a, b := reflect.ValueOf(s), reflect.ValueOf(now)
	for i := range a.NumField() {
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			name := strings.Split(a.Type().Field(i).Tag.Get("json"), ",")[0]
			d = append(d, fmt.Sprintf("%s %v (now %v)", name, a.Field(i).Interface(), b.Field(i).Interface()))
		}
	}
	return strings.Join(d, ", ")
}

func writeState(dir string, s *state) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	opts, err := json.Marshal(s.Options)
	if err != nil {
		return err
	}
	var ts []formats.Tensor
	for _, set := range []struct {
		prefix string
		p      *Params
	}{{"param.", s.Params}, {"adam_m.", s.M}, {"adam_v.", s.V}} {
		for _, t := range set.p.List {
			ts = append(ts, formats.Tensor{Name: set.prefix + t.Name, DType: formats.F32, Shape: t.Shape, Data: graph.AsBytes(t.Data)})
		}
	}
	var buf bytes.Buffer
	meta := map[string]string{"format": "redrafter-train/1", "step": strconv.Itoa(s.Step), "options": string(opts)}
	if err := formats.WriteSafetensors(&buf, ts, meta); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return writeAtomic(filepath.Join(dir, StateFile), buf.Bytes())
}

// readState reads dir's training state; it returns nil, nil if there is none.
func readState(dir string) (*state, error) {
	path := filepath.Join(dir, StateFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	f, err := formats.ParseSafetensors(path, raw)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	s := &state{}
	if f.Meta["format"] != "redrafter-train/1" {
		return nil, fmt.Errorf("train: %s: not a training state (format %q)", path, f.Meta["format"])
	}
	if s.Step, err = strconv.Atoi(f.Meta["step"]); err != nil {
		return nil, fmt.Errorf("train: %s: step: %w", path, err)
	}
	if err := json.Unmarshal([]byte(f.Meta["options"]), &s.Options); err != nil {
		return nil, fmt.Errorf("train: %s: options: %w", path, err)
	}
	s.Params, s.M, s.V = NewParams(s.Options.Config), NewParams(s.Options.Config), NewParams(s.Options.Config)
	for _, set := range []struct {
		prefix string
		p      *Params
	}{{"param.", s.Params}, {"adam_m.", s.M}, {"adam_v.", s.V}} {
		for _, t := range set.p.List {
			ft, ok := f.Tensor(set.prefix + t.Name)
			if !ok {
				return nil, fmt.Errorf("train: %s: tensor %q is missing", path, set.prefix+t.Name)
			}
			if ft.DType != formats.F32 || len(ft.Data) != 4*len(t.Data) {
				return nil, fmt.Errorf("train: %s: tensor %q has dtype %v and shape %v, want F32 %v", path, ft.Name, ft.DType, ft.Shape, t.Shape)
			}
			copy(t.Data, f32s(ft.Data))
		}
	}
	return s, nil
}
