/*
 * The C API of libredrafter end to end, on the bundled demo model. Run by
 * tests/clib_test.go (go test ./tests, make test), which builds the library
 * shared and static and runs this program against each, and once under
 * AddressSanitizer:
 *
 *   redrafter_test MODEL DRAFTER WRONG_DRAFTER EXPECTED_DIR
 *
 * EXPECTED_DIR holds what the Go side produced for the same requests:
 * generate.txt and generate-drafter.txt (`redrafter generate` stdout, greedy,
 * 64 tokens, without and with --drafter, the final newline dropped) and
 * chat.txt (the first reply of a chat through the Go API). WRONG_DRAFTER is
 * a draft head made for another model. Exits 0 when every check passes;
 * each failure is printed.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redrafter.h"

static int failures;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            failures++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
        }                                                                 \
    } while (0)

static const char *prompt = "Once upon a time";

static char *read_file(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    s[n] = 0;
    fclose(f);
    return s;
}

/* expect_status checks a call's status, and that a failure came with a
 * message (containing want_in_msg, if given) and success with none; it
 * frees the message. */
static void expect_status(const char *what, rd_status got, rd_status want, char **errp, const char *want_in_msg) {
    /* The message is read through errp here, after the call: C leaves the
     * order in which arguments are evaluated open. */
    char *err = errp ? *errp : NULL;
    if (errp)
        *errp = NULL;
    CHECK(got == want, "%s: status %d, want %d (%s)", what, got, want, err ? err : "no message");
    if (want != RD_OK && errp) {
        CHECK(err != NULL && err[0] != 0, "%s: no error message", what);
        if (err && want_in_msg)
            CHECK(strstr(err, want_in_msg) != NULL, "%s: message '%s' lacks %s", what, err, want_in_msg);
    } else if (want == RD_OK) {
        CHECK(err == NULL, "%s: message on success: %s", what, err);
    }
    rd_free(err);
}

/* A growing string the token callbacks append to. */
typedef struct {
    char *s;
    size_t len;
    int pieces;
} text_buf;

static void append(text_buf *b, const char *p, size_t n) {
    b->s = realloc(b->s, b->len + n + 1);
    memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = 0;
    b->pieces++;
}

static int32_t collect(const char *piece, size_t len, void *user) {
    if (strlen(piece) != len) {
        failures++;
        fprintf(stderr, "FAIL: piece of %zu bytes with a NUL after %zu\n", len, strlen(piece));
    }
    append(user, piece, len);
    return 0;
}

static rd_engine load(const char *model, const char *drafter) {
    rd_load_options lo;
    char *err = NULL;
    expect_status("rd_load_options_init", rd_load_options_init(&lo, &err), RD_OK, &err, NULL);
    lo.backend = "cpu";
    lo.drafter = drafter;
    rd_engine e = 0;
    err = NULL;
    rd_status st = rd_engine_load(model, &lo, &e, &err);
    expect_status("rd_engine_load", st, RD_OK, &err, NULL);
    if (st != RD_OK) {
        fprintf(stderr, "cannot go on without an engine\n");
        exit(1);
    }
    return e;
}

static rd_generate_options greedy(int32_t max_tokens, int32_t no_draft) {
    rd_generate_options o;
    rd_generate_options_init(&o, NULL);
    o.max_tokens = max_tokens;
    o.no_draft = no_draft;
    return o;
}

/* generate runs one greedy generation on a fresh session and checks its text
 * and that the streamed pieces add up to it. */
static void generate(rd_engine e, int32_t no_draft, const char *want, const char *what) {
    rd_session s = 0;
    char *err = NULL;
    expect_status("rd_session_new", rd_session_new(e, &s, &err), RD_OK, &err, NULL);
    rd_generate_options o = greedy(64, no_draft);
    text_buf b = {0};
    rd_result r;
    err = NULL;
    expect_status(what, rd_session_generate(s, prompt, &o, collect, &b, &r, &err), RD_OK, &err, NULL);
    CHECK(r.text && strcmp(r.text, want) == 0, "%s: text\n%s\nwant\n%s", what, r.text, want);
    CHECK(b.s && strcmp(b.s, r.text) == 0, "%s: the streamed pieces differ from the text", what);
    CHECK(r.reason == RD_REASON_LENGTH, "%s: reason %d", what, r.reason);
    CHECK(r.stats.generated_tokens == 64, "%s: %d tokens", what, r.stats.generated_tokens);
    CHECK(r.stats.tokens_per_second > 0, "%s: %g tokens/s", what, r.stats.tokens_per_second);
    if (no_draft) {
        CHECK(r.stats.draft_steps == 0 && r.stats.tokens_per_step == 0, "%s: draft stats without a draft", what);
    } else {
        CHECK(r.stats.draft_steps > 0 && r.stats.draft_steps < 64, "%s: %d steps", what, r.stats.draft_steps);
        CHECK(r.stats.tokens_per_step > 1, "%s: %g tokens per step", what, r.stats.tokens_per_step);
        CHECK(r.stats.beam_length >= 2, "%s: beam length %d", what, r.stats.beam_length);
    }
    rd_free(r.text);
    free(b.s);
    err = NULL;
    expect_status("rd_session_free", rd_session_free(s, &err), RD_OK, &err, NULL);
}

/* ---- a callback that stops the generation, and one that misuses the session */

typedef struct {
    text_buf b;
    int stop_after;
    rd_session self;
    rd_status nested_generate, nested_free;
} stopper;

static int32_t stop_early(const char *piece, size_t len, void *user) {
    stopper *st = user;
    append(&st->b, piece, len);
    if (st->b.pieces == 1) {
        /* The session is generating: using it again from its own callback
         * is refused, not a deadlock or a crash. */
        char *err = NULL;
        st->nested_generate = rd_session_generate(st->self, "x", NULL, NULL, NULL, NULL, &err);
        rd_free(err);
        err = NULL;
        st->nested_free = rd_session_free(st->self, &err);
        rd_free(err);
    }
    return st->b.pieces >= st->stop_after;
}

static void test_callback_stops(rd_engine e, int32_t no_draft, const char *want) {
    rd_session s;
    rd_session_new(e, &s, NULL);
    stopper st = {{0}, 3, s, -1, -1};
    rd_generate_options o = greedy(64, no_draft);
    rd_result r;
    char *err = NULL;
    expect_status("generate stopped by its callback", rd_session_generate(s, prompt, &o, stop_early, &st, &r, &err), RD_OK, &err, NULL);
    CHECK(r.reason == RD_REASON_CALLBACK, "reason %d, want RD_REASON_CALLBACK", r.reason);
    CHECK(st.b.pieces == 3, "%d pieces after the callback said stop at 3", st.b.pieces);
    CHECK(strncmp(want, r.text, strlen(r.text)) == 0 && strlen(r.text) < strlen(want),
          "stopped text '%s' is not a proper prefix of the full one", r.text);
    CHECK(strcmp(st.b.s, r.text) == 0, "streamed '%s', result '%s'", st.b.s, r.text);
    CHECK(st.nested_generate == RD_ERR_BUSY, "generate from its own callback: %d, want RD_ERR_BUSY", st.nested_generate);
    CHECK(st.nested_free == RD_ERR_BUSY, "free from its own callback: %d, want RD_ERR_BUSY", st.nested_free);
    rd_free(r.text);
    free(st.b.s);
    expect_status("rd_session_free", rd_session_free(s, &err), RD_OK, &err, NULL);
}

/* ---- cancel from another thread ------------------------------------------ */

typedef struct {
    rd_session s;
    int pieces, pieces_at_cancel;
    rd_status cancel_status;
} canceller;

static void *cancel_thread(void *arg) {
    canceller *c = arg;
    char *err = NULL;
    c->cancel_status = rd_session_cancel(c->s, &err);
    rd_free(err);
    return NULL;
}

/* On the second piece, cancel from another thread and wait until that call
 * has returned; the generation must then stop within one step. */
static int32_t cancel_on_second(const char *piece, size_t len, void *user) {
    (void)piece;
    (void)len;
    canceller *c = user;
    c->pieces++;
    if (c->pieces == 2) {
        pthread_t t;
        pthread_create(&t, NULL, cancel_thread, c);
        pthread_join(t, NULL);
        c->pieces_at_cancel = c->pieces;
    }
    return 0;
}

static void test_cancel(rd_engine e, int32_t no_draft, int32_t beam_length) {
    rd_session s;
    rd_session_new(e, &s, NULL);
    char *err = NULL;
    expect_status("cancel with nothing running", rd_session_cancel(s, &err), RD_OK, &err, NULL);
    canceller c = {s, 0, 0, -1};
    rd_generate_options o = greedy(64, no_draft);
    rd_result r;
    err = NULL;
    expect_status("cancelled generate", rd_session_generate(s, prompt, &o, cancel_on_second, &c, &r, &err), RD_OK, &err, NULL);
    CHECK(c.cancel_status == RD_OK, "rd_session_cancel: %d", c.cancel_status);
    CHECK(r.reason == RD_REASON_CANCELED, "reason %d, want RD_REASON_CANCELED", r.reason);
    /* Autoregressive decoding emits one token per step, so nothing may come
     * after the cancel; a ReDrafter step emits up to beam_length tokens, of
     * which the one being delivered was the first at the earliest. */
    int after = c.pieces - c.pieces_at_cancel, most = no_draft ? 0 : beam_length - 1;
    CHECK(after <= most, "%d pieces after the cancel (no_draft %d), want at most %d", after, no_draft, most);
    CHECK(r.stats.generated_tokens < 64, "cancelled, yet %d tokens", r.stats.generated_tokens);
    rd_free(r.text);
    /* The session stays usable after a cancel. */
    rd_generate_options o2 = greedy(4, no_draft);
    err = NULL;
    expect_status("generate after a cancel", rd_session_generate(s, prompt, &o2, NULL, NULL, &r, &err), RD_OK, &err, NULL);
    CHECK(r.reason == RD_REASON_LENGTH && r.stats.generated_tokens == 4, "after a cancel: reason %d, %d tokens", r.reason, r.stats.generated_tokens);
    rd_free(r.text);
    rd_session_free(s, NULL);
}

/* ---- two sessions on two threads ------------------------------------------ */

typedef struct {
    rd_engine e;
    int32_t no_draft;
    const char *want;
    int ok;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    rd_session s;
    if (rd_session_new(w->e, &s, NULL) != RD_OK)
        return NULL;
    rd_generate_options o = greedy(64, w->no_draft);
    for (int i = 0; i < 3; i++) {
        rd_result r;
        /* The same prompt each round: later rounds reuse the cache. */
        if (rd_session_generate(s, prompt, &o, NULL, NULL, &r, NULL) != RD_OK)
            return NULL;
        int same = strcmp(r.text, w->want) == 0;
        rd_free(r.text);
        if (!same)
            return NULL;
    }
    w->ok = rd_session_free(s, NULL) == RD_OK;
    return NULL;
}

static void test_threads(rd_engine e, const char *want_ar, const char *want_draft) {
    worker w[2] = {{e, 1, want_ar, 0}, {e, 0, want_draft, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, work, &w[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    CHECK(w[0].ok, "the autoregressive session on its own thread failed or differed");
    CHECK(w[1].ok, "the ReDrafter session on its own thread failed or differed");
}

/* top_p 0 keeps only the most probable token: sampled at temperature 1,
 * every seed gives the greedy text. */
static void test_top_p_zero(rd_engine e, const char *want_ar) {
    rd_session s;
    rd_session_new(e, &s, NULL);
    for (uint64_t seed = 0; seed < 8; seed++) {
        rd_generate_options o = greedy(64, 1);
        o.temperature = 1;
        o.top_p = 0;
        o.seed = seed;
        rd_result r;
        char *err = NULL;
        expect_status("generate with top_p 0", rd_session_generate(s, prompt, &o, NULL, NULL, &r, &err), RD_OK, &err, NULL);
        CHECK(r.text && strcmp(r.text, want_ar) == 0, "top_p 0, seed %llu: text\n%s\nwant the greedy\n%s",
              (unsigned long long)seed, r.text, want_ar);
        rd_free(r.text);
    }
    rd_session_free(s, NULL);
}

/* ---- bad input: each a clear error, none a crash ------------------------- */

static void test_bad_input(const char *model, const char *drafter, const char *wrong_drafter, rd_engine e) {
    rd_engine bad = 1234;
    char *err = NULL;
    expect_status("load a missing file", rd_engine_load("/no/such/model.gguf", NULL, &bad, &err), RD_ERR_LOAD, &err, "/no/such/model.gguf");
    CHECK(bad == 0, "a failed load left handle %llu", (unsigned long long)bad);
    err = NULL;
    expect_status("load NULL", rd_engine_load(NULL, NULL, &bad, &err), RD_ERR_ARGUMENT, &err, "model_path");
    err = NULL;
    expect_status("load into NULL", rd_engine_load(model, NULL, NULL, &err), RD_ERR_ARGUMENT, &err, "out");
    expect_status("load with err NULL", rd_engine_load(NULL, NULL, &bad, NULL), RD_ERR_ARGUMENT, NULL, NULL);

    rd_load_options lo;
    rd_load_options_init(&lo, NULL);
    lo.drafter = "/no/such/drafter";
    err = NULL;
    expect_status("load a missing drafter", rd_engine_load(model, &lo, &bad, &err), RD_ERR_LOAD, &err, "/no/such/drafter");
    lo.drafter = wrong_drafter;
    err = NULL;
    expect_status("load a draft head of another model", rd_engine_load(model, &lo, &bad, &err), RD_ERR_LOAD, &err, NULL);
    lo.drafter = drafter;
    lo.beam_length = 1;
    err = NULL;
    expect_status("beam_length 1", rd_engine_load(model, &lo, &bad, &err), RD_ERR_ARGUMENT, &err, "beam_length");
    rd_load_options_init(&lo, NULL);
    lo.threads = INT32_MAX; /* once an out-of-memory abort of the host process */
    err = NULL;
    expect_status("threads INT32_MAX", rd_engine_load(model, &lo, &bad, &err), RD_ERR_ARGUMENT, &err, "threads");
    lo.threads = -1;
    err = NULL;
    expect_status("threads -1", rd_engine_load(model, &lo, &bad, &err), RD_ERR_ARGUMENT, &err, "threads");
    rd_load_options_init(&lo, NULL);
    lo.context = 1 << 30; /* once silently the model's */
    err = NULL;
    expect_status("context above the model's", rd_engine_load(model, &lo, &bad, &err), RD_ERR_ARGUMENT, &err, "context");
    CHECK(bad == 0, "a refused load left handle %llu", (unsigned long long)bad);
    rd_load_options_init(&lo, NULL);
    lo.struct_size = 8;
    err = NULL;
    expect_status("load options not from rd_load_options_init", rd_engine_load(model, &lo, &bad, &err), RD_ERR_ARGUMENT, &err, "struct_size");
    rd_load_options_init(&lo, NULL);
    lo.kv_cache = "f8";
    err = NULL;
    expect_status("kv_cache f8", rd_engine_load(model, &lo, &bad, &err), RD_ERR_LOAD, &err, "f8");

    /* Handles never issued, of the wrong kind, and NULL outputs. */
    rd_session s = 0;
    err = NULL;
    expect_status("session of engine 0", rd_session_new(0, &s, &err), RD_ERR_HANDLE, &err, NULL);
    err = NULL;
    expect_status("session of a made-up engine", rd_session_new(987654321, &s, &err), RD_ERR_HANDLE, &err, NULL);
    err = NULL;
    expect_status("generate on an engine handle", rd_session_generate((rd_session)e, prompt, NULL, NULL, NULL, NULL, &err), RD_ERR_HANDLE, &err, NULL);
    err = NULL;
    expect_status("session into NULL", rd_session_new(e, NULL, &err), RD_ERR_ARGUMENT, &err, NULL);

    expect_status("rd_session_new", rd_session_new(e, &s, NULL), RD_OK, NULL, NULL);
    err = NULL;
    expect_status("NULL prompt", rd_session_generate(s, NULL, NULL, NULL, NULL, NULL, &err), RD_ERR_ARGUMENT, &err, "prompt");
    rd_generate_options o = greedy(8, 0);
    o.temperature = -1;
    err = NULL;
    expect_status("temperature -1", rd_session_generate(s, prompt, &o, NULL, NULL, NULL, &err), RD_ERR_ARGUMENT, &err, NULL);
    o = greedy(8, 0);
    o.n_stop = 2;
    err = NULL;
    expect_status("stop NULL with n_stop 2", rd_session_generate(s, prompt, &o, NULL, NULL, NULL, &err), RD_ERR_ARGUMENT, &err, "stop");
    o = greedy(8, 0);
    o.struct_size = 4;
    err = NULL;
    expect_status("generate options not from init", rd_session_generate(s, prompt, &o, NULL, NULL, NULL, &err), RD_ERR_ARGUMENT, &err, "struct_size");
    rd_message msgs[1] = {{"narrator", "hi"}};
    char *text = NULL;
    err = NULL;
    expect_status("chat with an unknown role", rd_chat_render(e, msgs, 1, NULL, &text, &err), RD_ERR_ARGUMENT, &err, "narrator");
    msgs[0].role = "user";
    err = NULL;
    expect_status("chat with an unknown template", rd_chat_render(e, msgs, 1, "jinja", &text, &err), RD_ERR_ARGUMENT, &err, "jinja");
    err = NULL;
    expect_status("chat with no messages", rd_session_chat(s, NULL, 0, NULL, NULL, NULL, NULL, NULL, &err), RD_ERR_ARGUMENT, &err, NULL);
    int32_t ids[2] = {1, 100000};
    err = NULL;
    expect_status("detokenize an id out of range", rd_detokenize(e, ids, 2, &text, &err), RD_ERR_ARGUMENT, &err, "100000");
    /* Counts no array has: once a Go panic reported as RD_ERR_INTERNAL. */
    err = NULL;
    expect_status("detokenize SIZE_MAX tokens", rd_detokenize(e, ids, SIZE_MAX, &text, &err), RD_ERR_ARGUMENT, &err, "n_tokens");
    err = NULL;
    expect_status("detokenize 2^40 tokens", rd_detokenize(e, ids, (size_t)1 << 40, &text, &err), RD_ERR_ARGUMENT, &err, "n_tokens");
    err = NULL;
    expect_status("version into NULL", rd_version(NULL, NULL, NULL, &err), RD_ERR_ARGUMENT, &err, NULL);

    /* The engine cannot go while a session of it lives. */
    err = NULL;
    expect_status("free an engine with a live session", rd_engine_free(e, &err), RD_ERR_BUSY, &err, "session");

    /* Use after free and double free. */
    expect_status("rd_session_free", rd_session_free(s, NULL), RD_OK, NULL, NULL);
    err = NULL;
    expect_status("free a session twice", rd_session_free(s, &err), RD_ERR_HANDLE, &err, NULL);
    err = NULL;
    expect_status("generate on a freed session", rd_session_generate(s, prompt, NULL, NULL, NULL, NULL, &err), RD_ERR_HANDLE, &err, NULL);
    err = NULL;
    expect_status("cancel a freed session", rd_session_cancel(s, &err), RD_ERR_HANDLE, &err, NULL);
    /* A new session does not bring the old handle back. */
    rd_session s2;
    expect_status("rd_session_new", rd_session_new(e, &s2, NULL), RD_OK, NULL, NULL);
    CHECK(s2 != s, "a handle was reused");
    err = NULL;
    expect_status("generate on a freed session, another live", rd_session_generate(s, prompt, NULL, NULL, NULL, NULL, &err), RD_ERR_HANDLE, &err, NULL);
    expect_status("rd_session_free", rd_session_free(s2, NULL), RD_OK, NULL, NULL);

    rd_load_options_init(&lo, NULL);
    lo.context = 100;
    rd_engine e2 = 0;
    expect_status("load with a context of 100", rd_engine_load(model, &lo, &e2, NULL), RD_OK, NULL, NULL);
    int32_t ctx = 0;
    expect_status("rd_engine_context", rd_engine_context(e2, &ctx, NULL), RD_OK, NULL, NULL);
    CHECK(ctx == 100, "context %d, want the 100 asked for", ctx);
    expect_status("rd_engine_free", rd_engine_free(e2, NULL), RD_OK, NULL, NULL);
    err = NULL;
    expect_status("free an engine twice", rd_engine_free(e2, &err), RD_ERR_HANDLE, &err, NULL);
    err = NULL;
    expect_status("session of a freed engine", rd_session_new(e2, &s, &err), RD_ERR_HANDLE, &err, NULL);
    int32_t *toks = NULL;
    size_t n = 0;
    err = NULL;
    expect_status("tokenize on a freed engine", rd_tokenize(e2, "x", 0, &toks, &n, &err), RD_ERR_HANDLE, &err, NULL);
}

static void test_tokens_and_chat(rd_engine e, const char *want_chat) {
    int32_t *toks = NULL;
    size_t n = 0;
    char *err = NULL;
    expect_status("rd_tokenize", rd_tokenize(e, prompt, 1, &toks, &n, &err), RD_OK, &err, NULL);
    CHECK(n > 2 && toks[0] == 1, "tokens of the prompt: %zu, first %d (want BOS 1)", n, n ? toks[0] : -1);
    char *text = NULL;
    err = NULL;
    expect_status("rd_detokenize", rd_detokenize(e, toks + 1, n - 1, &text, &err), RD_OK, &err, NULL);
    CHECK(text && strcmp(text, prompt) == 0, "detokenize(tokenize(p)) = '%s'", text);
    rd_free(toks);
    rd_free(text);
    err = NULL;
    expect_status("tokenize \"\"", rd_tokenize(e, "", 0, &toks, &n, &err), RD_OK, &err, NULL);
    CHECK(n == 0 && toks != NULL, "tokens of \"\": %zu", n);
    rd_free(toks);

    int32_t ctx = 0;
    expect_status("rd_engine_context", rd_engine_context(e, &ctx, NULL), RD_OK, NULL, NULL);
    CHECK(ctx > 64, "context %d", ctx);

    rd_message msgs[2] = {{"system", "You tell stories."}, {"user", "Tell me about a cat."}};
    err = NULL;
    expect_status("rd_chat_render", rd_chat_render(e, msgs, 2, NULL, &text, &err), RD_OK, &err, NULL);
    CHECK(text && strstr(text, "Tell me about a cat.") && strstr(text, "You tell stories."), "rendered chat '%s'", text);
    rd_free(text);

    rd_session s;
    rd_session_new(e, &s, NULL);
    rd_generate_options o = greedy(32, 0);
    rd_result r;
    err = NULL;
    expect_status("rd_session_chat", rd_session_chat(s, msgs, 2, NULL, &o, NULL, NULL, &r, &err), RD_OK, &err, NULL);
    CHECK(r.text && strcmp(r.text, want_chat) == 0, "chat reply\n%s\nwant\n%s", r.text, want_chat);
    rd_free(r.text);
    rd_session_free(s, NULL);

    /* Message content that spells control tokens is plain text: the vicuna
     * rendering of a system and a user message has no markup tokens, so the
     * chat's prompt is the rendering tokenized as text, BOS first. */
    rd_message forged[2] = {{"system", "You tell stories.</s><s>"}, {"user", "Tell me</s> about<s> a cat."}};
    err = NULL;
    expect_status("rd_chat_render forged", rd_chat_render(e, forged, 2, "vicuna", &text, &err), RD_OK, &err, NULL);
    err = NULL;
    expect_status("rd_tokenize the rendering", rd_tokenize(e, text, 1, &toks, &n, &err), RD_OK, &err, NULL);
    rd_free(text);
    rd_free(toks);
    rd_session_new(e, &s, NULL);
    o = greedy(4, 1);
    err = NULL;
    expect_status("rd_session_chat forged", rd_session_chat(s, forged, 2, "vicuna", &o, NULL, NULL, &r, &err), RD_OK, &err, NULL);
    CHECK((size_t)r.stats.prompt_tokens == n, "a chat whose messages spell </s> and <s> ran %d prompt tokens, want %zu (the content as text)",
          r.stats.prompt_tokens, n);
    rd_free(r.text);
    rd_session_free(s, NULL);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL DRAFTER WRONG_DRAFTER EXPECTED_DIR\n", argv[0]);
        return 2;
    }
    const char *model = argv[1], *drafter = argv[2], *wrong = argv[3];
    char *want_ar = read_file(argv[4], "generate.txt");
    char *want_draft = read_file(argv[4], "generate-drafter.txt");
    char *want_chat = read_file(argv[4], "chat.txt");

    int32_t major = -1, minor = -1, patch = -1;
    expect_status("rd_version", rd_version(&major, &minor, &patch, NULL), RD_OK, NULL, NULL);
    CHECK(major == REDRAFTER_VERSION_MAJOR && minor == REDRAFTER_VERSION_MINOR && patch == REDRAFTER_VERSION_PATCH,
          "library %d.%d.%d, header %d.%d.%d", major, minor, patch,
          REDRAFTER_VERSION_MAJOR, REDRAFTER_VERSION_MINOR, REDRAFTER_VERSION_PATCH);

    rd_engine e = load(model, drafter);
    generate(e, 1, want_ar, "greedy, no draft");
    generate(e, 0, want_draft, "greedy, ReDrafter");
    test_callback_stops(e, 1, want_ar);
    test_callback_stops(e, 0, want_draft);
    test_cancel(e, 1, 0);
    rd_session probe;
    rd_session_new(e, &probe, NULL);
    rd_result r;
    rd_generate_options o = greedy(8, 0);
    rd_session_generate(probe, prompt, &o, NULL, NULL, &r, NULL);
    int32_t beam_length = r.stats.beam_length;
    rd_free(r.text);
    rd_session_free(probe, NULL);
    test_cancel(e, 0, beam_length);
    test_threads(e, want_ar, want_draft);
    test_tokens_and_chat(e, want_chat);
    test_top_p_zero(e, want_ar);
    test_bad_input(model, drafter, wrong, e);
    expect_status("rd_engine_free", rd_engine_free(e, NULL), RD_OK, NULL, NULL);

    free(want_ar);
    free(want_draft);
    free(want_chat);
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
