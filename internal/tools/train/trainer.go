package train

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/apihooks"
	"github.com/seed9b8f47b1/redrafter/internal/hostmath"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
)

// Options configure Train. The zero value of a field picks its default.
type Options struct {
	Data     *Set    // the distillation set to train on
	EvalData *Set    // held-out set; nil holds out Holdout of Data's prompts
	Holdout  float64 // fraction of Data's prompts held out when EvalData is nil (default 0.05)
	Out      string  // checkpoint directory
	// Resume continues from the training state in Out; without it, Out
	// must not hold one.
	Resume bool
	// Init is a draft head directory whose weights the training starts
	// from instead of random ones (fine-tuning: a head made for the fp32
	// model, trained further on a quantized model's own continuations).
	// Its shape must be the one Layers and ExitDim describe.
	Init string

	Steps       int     // optimiser updates (default 2000)
	Batch       int     // positions per update, each unrolled over Predict steps (default 512)
	Layers      int     // residual blocks of the head (default 2)
	ExitDim     int     // width of the blocks (default 2H: no input projection)
	Predict     int     // T, the positions each row predicts (default 5, the reference's)
	LR          float64 // peak learning rate (default 1e-3, the reference's)
	Warmup      float64 // fraction of Steps of linear warm-up (default 0.1)
	WeightDecay float64 // AdamW decoupled weight decay on matrices (default 0)
	Clip        float64 // global gradient norm limit (default 1; negative: none)
	KLWeight    float64 // weight of KL(p_LLM ‖ q) next to the cross-entropy (default 0)
	EvalEvery   int     // steps between held-out evaluations (default 200)
	SaveEvery   int     // steps between checkpoints (default 500)
	EvalRows    int     // held-out positions evaluated (default 8192; the same every time)
	Seed        uint64  // initialisation and data order
	Threads     int     // host threads for the head's math (default GOMAXPROCS)

	// Progress, if set, is called after every step and evaluation.
	Progress func(Progress)
	Log      *slog.Logger
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Steps, 2000)
	def(&o.Batch, 512)
	def(&o.Layers, 2)
	def(&o.Predict, 5)
	def(&o.EvalEvery, 200)
	def(&o.SaveEvery, 500)
	def(&o.EvalRows, 8192)
	def(&o.Threads, runtime.GOMAXPROCS(0))
	if o.LR == 0 {
		o.LR = 1e-3
	}
	if o.Warmup == 0 {
		o.Warmup = 0.1
	}
	if o.Clip == 0 {
		o.Clip = 1
	}
	if o.Holdout == 0 {
		o.Holdout = 0.05
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

func (o *Options) validate() error {
	switch {
	case o.Data == nil:
		return errors.New("train: no training data")
	case o.Out == "":
		return errors.New("train: no output directory")
	case o.Steps < 0 || o.Batch < 0 || o.Layers < 0 || o.ExitDim < 0 || o.Predict < 0 || o.EvalEvery < 0 || o.SaveEvery < 0 || o.EvalRows < 0:
		return errors.New("train: steps, batch, layers, exit dim, predict and the intervals must not be negative")
	case !(o.LR > 0) || o.Warmup < 0 || o.Warmup >= 1 || o.WeightDecay < 0 || o.KLWeight < 0:
		return errors.New("train: the learning rate must be positive, warm-up in [0, 1), weight decay and KL weight not negative")
	case o.EvalData == nil && !(o.Holdout > 0 && o.Holdout < 1):
		return errors.New("train: the held-out fraction must be in (0, 1)")
	}
	return nil
}

// Progress is Train's running state.
type Progress struct {
	// Phase is "context" while the LLM computes the hidden states of the
	// data (Done/Total sequences), then "train" (Done/Total steps).
	Phase       string
	Done, Total int
	LR          float64
	Loss        float64 // training loss, a moving average over about 20 steps
	GradNorm    float64 // gradient norm before clipping, likewise
	Eval        *Eval   // the latest held-out evaluation, if any
	Elapsed     time.Duration
	ETA         time.Duration
}

// Eval is a held-out evaluation: the loss (Σ_i mean cross-entropy of step
// i) and the top-1 accuracy of each predicted position.
type Eval struct {
	Step   int
	Loss   float64
	Acc    []float64 // [Predict]: Acc[i] predicts x_{t+2+i} from h_t and x_{t+1..t+1+i}
	Labels int
}

func (e Eval) String() string {
	s := fmt.Sprintf("held-out loss %.3f acc@1", e.Loss)
	for _, a := range e.Acc {
		s += fmt.Sprintf(" %.3f", a)
	}
	return s
}

// Report is what Train did.
type Report struct {
	Config                 drafter.Config
	Params                 int
	Steps                  int // total, including resumed ones
	TrainSeqs, TrainTokens int
	EvalSeqs               int
	TrainRows              int           // positions with at least one label
	TeacherAgreement       float64       // how often the data's next token is the LLM's argmax
	ContextTime, TrainTime time.Duration // this run's
	Final                  Eval
	ResumedFrom            int
	Epochs                 float64
}

// seq is a sequence with the LLM's final-norm hidden states.
type seq struct {
	tokens    []int32
	promptLen int
	hidden    []float32 // [len(tokens), H]
}

// Trainer holds a training run.
type Trainer struct {
	o      Options
	e      *redrafter.Engine
	p, g   *Params
	opt    *adamW
	head   *hostHead
	output []float32 // [V, H] the LLM's output projection, for soft targets
	train  []seq
	eval   []seq
	rows   []uint64 // training rows: seq<<32 | t
	erows  []uint64
	perm   []int
	epoch  int
	step   int
	rep    Report
}

// ErrStateExists is Train's error when the output directory already holds a
// training state and Options.Resume is false: continue it with Resume, or
// train into another directory.
var ErrStateExists = errors.New("the directory already holds a training state (resume it, or choose another output directory)")

// Train trains a draft head for e's model on o.Data and leaves it in o.Out
// in the reference layout (config.json, model.safetensors), loadable by
// drafter.Load, next to the optimiser state (training_state.safetensors).
func Train(ctx context.Context, e *redrafter.Engine, o Options) (*Report, error) {
	o.defaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	c := e.Model()
	if o.Data.Meta.VocabSize != c.Vocab || o.Data.Meta.HiddenSize != c.Dim {
		return nil, fmt.Errorf("train: %s was distilled from a model with vocabulary %d and hidden size %d, not %d and %d",
			o.Data.Dir, o.Data.Meta.VocabSize, o.Data.Meta.HiddenSize, c.Vocab, c.Dim)
	}
	if o.EvalData != nil && (o.EvalData.Meta.VocabSize != c.Vocab || o.EvalData.Meta.HiddenSize != c.Dim) {
		return nil, fmt.Errorf("train: %s was distilled from another model", o.EvalData.Dir)
	}
	t := &Trainer{o: o, e: e}
	cfg := drafter.Config{ModelType: "recurrent_drafting_drafter", VocabSize: c.Vocab, HiddenSize: c.Dim,
		ExitDim: o.ExitDim, NumDraftLayers: o.Layers, RNN: true}
	if cfg.ExitDim == 0 {
		cfg.ExitDim = 2 * c.Dim
	}
	emb, output, err := apihooks.Embeddings(e)
	if err != nil {
		return nil, err
	}
	t.output = output

	// Split and index the data.
	trainRecs, evalRecs := o.Data.Records, []Record(nil)
	if o.EvalData != nil {
		evalRecs = o.EvalData.Records
	} else {
		trainRecs = nil
		for _, r := range o.Data.Records {
			if float64(mixSeed(0x686f6c646f7574, uint64(r.Prompt))%1_000_000) < o.Holdout*1e6 {
				evalRecs = append(evalRecs, r)
			} else {
				trainRecs = append(trainRecs, r)
			}
		}
	}
	if len(trainRecs) == 0 || len(evalRecs) == 0 {
		return nil, fmt.Errorf("train: %d training and %d held-out sequences: need some of each", len(trainRecs), len(evalRecs))
	}
	t.rep.Config, t.rep.TrainSeqs, t.rep.EvalSeqs = cfg, len(trainRecs), len(evalRecs)
	for _, r := range trainRecs {
		t.rep.TrainTokens += len(r.Tokens) - r.PromptLen
	}

	// Parameters: resumed, or drawn like the reference's (PyTorch defaults).
	st, err := readState(o.Out)
	switch {
	case err != nil:
		return nil, err
	case st != nil && !o.Resume:
		return nil, fmt.Errorf("train: %s holds a training state at step %d: %w", o.Out, st.Step, ErrStateExists)
	case st != nil:
		if d := st.Options.diff(t.fingerprint(cfg)); len(d) > 0 {
			return nil, fmt.Errorf("train: cannot resume %s: it was trained with %s", o.Out, d)
		}
		t.p, t.opt, t.step = st.Params, newAdamW(st.Params, o.WeightDecay), st.Step
		t.opt.m, t.opt.v, t.opt.step = st.M, st.V, st.Step
		t.rep.ResumedFrom = st.Step
		o.Log.Info("resuming", "dir", o.Out, "step", st.Step)
	case o.Init != "":
		if t.p, err = initParams(o.Init, cfg); err != nil {
			return nil, err
		}
		t.opt = newAdamW(t.p, o.WeightDecay)
		o.Log.Info("starting from a head", "dir", o.Init)
	default:
		if t.p, err = FromHead(drafter.NewRandom(cfg, o.Seed)); err != nil {
			return nil, err
		}
		t.opt = newAdamW(t.p, o.WeightDecay)
	}
	t.g = NewParams(cfg)
	t.head = &hostHead{p: t.p, emb: emb, threads: o.Threads}
	t.rep.Params = t.p.Count()

	start := time.Now()
	if err := t.contexts(ctx, trainRecs, evalRecs); err != nil {
		return nil, err
	}
	t.rep.ContextTime = time.Since(start)
	o.Log.Info("hidden states computed", "sequences", len(trainRecs)+len(evalRecs), "ms", t.rep.ContextTime.Milliseconds(),
		"teacher_agreement", t.rep.TeacherAgreement)
	t.rows = rowsOf(t.train, o.Predict)
	t.erows = rowsOf(t.eval, o.Predict)
	if len(t.rows) == 0 || len(t.erows) == 0 {
		return nil, errors.New("train: the data has no continuation tokens to learn")
	}
	if len(t.erows) > o.EvalRows {
		r := rand.New(rand.NewPCG(0x6576616c, 0))
		r.Shuffle(len(t.erows), func(i, j int) { t.erows[i], t.erows[j] = t.erows[j], t.erows[i] })
		t.erows = t.erows[:o.EvalRows]
		slices.Sort(t.erows)
	}
	t.rep.TrainRows = len(t.rows)
	if err := t.loop(ctx); err != nil {
		return &t.rep, err
	}
	t.rep.Steps = t.step
	t.rep.Epochs = float64(t.step) * float64(o.Batch) / float64(len(t.rows))
	return &t.rep, nil
}

// fingerprint is what a resumed run must share with the saved one.
func (t *Trainer) fingerprint(c drafter.Config) stateOptions {
	o := t.o
	return stateOptions{Config: c, Steps: o.Steps, Batch: o.Batch, Predict: o.Predict, LR: o.LR, Warmup: o.Warmup,
		WeightDecay: o.WeightDecay, Clip: o.Clip, KLWeight: o.KLWeight, Seed: o.Seed, TrainSeqs: t.rep.TrainSeqs,
		TrainTokens: t.rep.TrainTokens, Init: o.Init}
}

// initParams loads the head in dir as the starting weights of a head
// shaped by cfg.
func initParams(dir string, cfg drafter.Config) (*Params, error) {
	h, err := drafter.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("train: --init: %w", err)
	}
	got := h.Config
	if got.VocabSize != cfg.VocabSize || got.HiddenSize != cfg.HiddenSize || got.ExitDim != cfg.ExitDim ||
		got.NumDraftLayers != cfg.NumDraftLayers || got.RNN != cfg.RNN {
		return nil, fmt.Errorf("train: --init %s is a head of vocabulary %d, hidden size %d, exit dim %d, %d layers, RNN %v; "+
			"the head to train has %d, %d, %d, %d, %v (set --layers and --exit-dim to match)", dir,
			got.VocabSize, got.HiddenSize, got.ExitDim, got.NumDraftLayers, got.RNN,
			cfg.VocabSize, cfg.HiddenSize, cfg.ExitDim, cfg.NumDraftLayers, cfg.RNN)
	}
	return FromHead(h)
}

// contexts runs the LLM over every sequence once and keeps its final-norm
// hidden states. Sequences are padded to a multiple of 64 tokens so that a
// few compiled plans serve all lengths; causal attention keeps the padding
// from reaching the real positions.
func (t *Trainer) contexts(ctx context.Context, trainRecs, evalRecs []Record) error {
	c := t.e.Model()
	p, err := apihooks.NewProbe(t.e)
	if err != nil {
		return err
	}
	defer p.Close()
	ctxLen := t.e.Context()
	total := len(trainRecs) + len(evalRecs)
	var logits []float32
	agree, labels := 0, 0
	start := time.Now()
	run := func(recs []Record, dst *[]seq, done int) error {
		for k, r := range recs {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := len(r.Tokens)
			if n > ctxLen {
				return fmt.Errorf("train: a sequence of prompt %d has %d tokens, more than the model's context of %d", r.Prompt, n, ctxLen)
			}
			padded := min(ctxLen, (n+63)/64*64)
			toks := make([]int32, padded)
			copy(toks, r.Tokens)
			hidden := make([]float32, padded*c.Dim)
			logits = grow(logits, padded*c.Vocab)
			if err := p.Forward(toks, logits, hidden); err != nil {
				return err
			}
			for j := max(r.PromptLen, 1); j < n; j++ {
				labels++
				if argmax(logits[(j-1)*c.Vocab:j*c.Vocab]) == int(r.Tokens[j]) {
					agree++
				}
			}
			*dst = append(*dst, seq{tokens: r.Tokens, promptLen: r.PromptLen, hidden: hidden[:n*c.Dim]})
			if t.o.Progress != nil {
				el := time.Since(start)
				d := done + k + 1
				t.o.Progress(Progress{Phase: "context", Done: d, Total: total, Elapsed: el,
					ETA: time.Duration(float64(el) / float64(d) * float64(total-d))})
			}
		}
		return nil
	}
	if err := run(trainRecs, &t.train, 0); err != nil {
		return err
	}
	if err := run(evalRecs, &t.eval, len(trainRecs)); err != nil {
		return err
	}
	if labels > 0 {
		t.rep.TeacherAgreement = float64(agree) / float64(labels)
	}
	return nil
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// rowsOf lists the positions t of every sequence that have at least one
// label among x_{t+2..t+1+T} in the continuation.
func rowsOf(seqs []seq, T int) []uint64 {
	var rows []uint64
	for s, q := range seqs {
		for t := max(0, q.promptLen-T-1); t+2 < len(q.tokens); t++ {
			rows = append(rows, uint64(s)<<32|uint64(t))
		}
	}
	return rows
}

// makeBatch gathers rows of seqs into a batch, with the LLM's distribution
// as soft targets when soft is set.
func (t *Trainer) makeBatch(seqs []seq, rows []uint64, soft bool) *batch {
	c := t.p.Config
	H, V, T, R := c.HiddenSize, c.VocabSize, t.o.Predict, len(rows)
	b := &batch{R: R, T: T, ctx: make([]float32, R*H), in: make([]int32, T*R), label: make([]int32, T*R)}
	var teacherH []float32
	if soft {
		teacherH = make([]float32, T*R*H)
	}
	for r, row := range rows {
		q := &seqs[row>>32]
		pos := int(uint32(row))
		n := len(q.tokens)
		copy(b.ctx[r*H:], q.hidden[pos*H:(pos+1)*H])
		for i := range T {
			k := i*R + r
			b.label[k] = -1
			if j := pos + 1 + i; j < n {
				b.in[k] = q.tokens[j]
				if j+1 < n && j+1 >= q.promptLen {
					b.label[k] = q.tokens[j+1]
					if soft {
						copy(teacherH[k*H:(k+1)*H], q.hidden[j*H:(j+1)*H])
					}
				}
			}
		}
	}
	if soft {
		b.soft = make([]float32, T*R*V)
		t.head.matmul(b.soft, V, teacherH, T*R, t.output) // the LLM's logits: lm_head(hidden)
		t.head.parallel(T*R, func(lo, hi int) {
			for k := lo; k < hi; k++ {
				row := b.soft[k*V : (k+1)*V]
				if b.label[k] < 0 {
					clear(row)
					continue
				}
				softmax(row)
			}
		})
	}
	return b
}

func softmax(x []float32) {
	mx := x[0]
	for _, v := range x {
		mx = max(mx, v)
	}
	var sum float64
	for i, v := range x {
		e := math.Exp(float64(v - mx))
		x[i] = float32(e)
		sum += e
	}
	hostmath.Scale(x, float32(1/sum))
}

// batchRows returns the rows of training step s: consecutive slices of a
// fresh permutation per epoch, so a resumed run sees the same batches.
func (t *Trainer) batchRows(s int) []uint64 {
	B, n := t.o.Batch, len(t.rows)
	out := make([]uint64, 0, B)
	for pos := s * B; len(out) < B; pos++ {
		ep := pos / n
		if t.perm == nil || t.epoch != ep {
			t.perm = rand.New(rand.NewPCG(t.o.Seed, uint64(ep)+1)).Perm(n)
			t.epoch = ep
		}
		out = append(out, t.rows[t.perm[pos%n]])
	}
	return out
}

// evaluate measures the head on the held-out rows.
func (t *Trainer) evaluate() Eval {
	var acc result
	for lo := 0; lo < len(t.erows); lo += t.o.Batch {
		b := t.makeBatch(t.eval, t.erows[lo:min(lo+t.o.Batch, len(t.erows))], false)
		acc.add(t.head.forward(b, 0, nil))
	}
	ev := Eval{Step: t.step, Acc: make([]float64, len(acc.Count))}
	for i, n := range acc.Count {
		if n > 0 {
			ev.Loss += acc.CESum[i] / float64(n)
			ev.Acc[i] = float64(acc.Correct[i]) / float64(n)
		}
		ev.Labels += n
	}
	return ev
}

func (t *Trainer) loop(ctx context.Context) error {
	o := t.o
	warmup := int(math.Round(o.Warmup * float64(o.Steps)))
	start := time.Now()
	first := t.step
	var last *Eval
	if t.step >= o.Steps {
		ev := t.evaluate()
		t.rep.Final, last = ev, &ev
	}
	var ema, emaNorm, emaW float64 // bias-corrected moving averages of the loss and gradient norm
	t.head.done = ctx.Done()
	defer func() { t.head.done = nil }()
	for t.step < o.Steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := t.makeBatch(t.train, t.batchRows(t.step), o.KLWeight > 0)
		res := t.head.forward(b, float32(o.KLWeight), t.g)
		if err := ctx.Err(); err != nil {
			return err // the pass was cut short: nothing of it is kept
		}
		norm := clipNorm(t.g, o.Clip)
		lr := schedule(o.LR, t.step, o.Steps, warmup)
		t.opt.update(t.p, t.g, lr)
		t.step++
		if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) {
			return fmt.Errorf("train: the loss diverged at step %d (learning rate %g)", t.step, lr)
		}
		ema, emaNorm, emaW = 0.95*ema+0.05*res.Loss, 0.95*emaNorm+0.05*norm, 0.95*emaW+0.05
		if t.step%o.EvalEvery == 0 || t.step == o.Steps {
			ev := t.evaluate()
			if err := ctx.Err(); err != nil {
				return err // the evaluation was cut short
			}
			last = &ev
			t.rep.Final = ev
			o.Log.Info("eval", "step", t.step, "loss", ev.Loss, "acc", ev.Acc)
		}
		if t.step%o.SaveEvery == 0 || t.step == o.Steps {
			if err := t.save(); err != nil {
				return err
			}
		}
		el := time.Since(start)
		t.rep.TrainTime = el
		if o.Progress != nil {
			done := t.step - first
			o.Progress(Progress{Phase: "train", Done: t.step, Total: o.Steps, LR: lr, Loss: ema / emaW,
				GradNorm: emaNorm / emaW, Eval: last, Elapsed: el,
				ETA: time.Duration(float64(el) / float64(done) * float64(o.Steps-t.step))})
		}
	}
	return nil
}

// save writes the training state, then the head in the reference layout.
func (t *Trainer) save() error {
	st := &state{Step: t.step, Options: t.fingerprint(t.p.Config), Params: t.p, M: t.opt.m, V: t.opt.v}
	if err := writeState(t.o.Out, st); err != nil {
		return err
	}
	return t.p.Head().Save(t.o.Out)
}
