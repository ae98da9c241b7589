/*
 * redrafter.h: the C API of libredrafter, an embeddable runtime for
 * Llama-family models with ReDrafter speculative decoding.
 *
 * Hand-written and versioned: the library built from cmd/libredrafter
 * implements exactly the functions declared here (a test checks that the
 * .so exports these and no other rd_ symbols). See docs/EMBEDDING.md.
 *
 * Conventions, for every function unless its comment says otherwise:
 *  - It returns an rd_status: RD_OK (0) on success, a nonzero code otherwise.
 *  - Its last parameter, `char **err`, may be NULL. When it is not NULL and
 *    the call fails, *err is set to a UTF-8 message the caller releases with
 *    rd_free; on success *err is set to NULL.
 *  - Strings are UTF-8 and NUL-terminated, in and out. Everything the
 *    library returns through a pointer (strings, token arrays, a result's
 *    text) is released with rd_free, and with nothing else.
 *  - Objects are opaque handles: nonzero 64-bit numbers that are never
 *    reused. A handle used after its free, freed twice, of the wrong kind,
 *    or never issued gives RD_ERR_HANDLE, not a crash.
 *  - No call keeps a pointer the caller passed in after it returns.
 *
 * Thread-safety is stated per function and enforced: a call that would
 * break a rule (a session used by two threads at once, an engine freed
 * while one of its sessions lives) returns RD_ERR_BUSY instead.
 */
#ifndef REDRAFTER_H
#define REDRAFTER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header. rd_version gives the library's; a library
 * with the same major version accepts every call of this header. */
#define REDRAFTER_VERSION_MAJOR 0
#define REDRAFTER_VERSION_MINOR 1
#define REDRAFTER_VERSION_PATCH 0

typedef int32_t rd_status;
enum {
    RD_OK = 0,
    RD_ERR_ARGUMENT = 1, /* a NULL where a value is needed, an option out of range */
    RD_ERR_HANDLE = 2,   /* not a live handle of the right kind */
    RD_ERR_LOAD = 3,     /* the model or draft head could not be loaded */
    RD_ERR_BUSY = 4,     /* the call would break a thread-safety rule */
    RD_ERR_GENERATE = 5, /* generation failed (the partial result is filled) */
    RD_ERR_INTERNAL = 6  /* a bug in the library, recovered; please report it */
};

/* Opaque handles; 0 is never a valid one. */
typedef uint64_t rd_engine;
typedef uint64_t rd_session;

/* Why a generation ended (rd_result.reason). */
typedef int32_t rd_reason;
enum {
    RD_REASON_EOS = 0,      /* the model ended the text */
    RD_REASON_STOP = 1,     /* a stop string was produced (it is not in the text) */
    RD_REASON_LENGTH = 2,   /* max_tokens or the context was reached */
    RD_REASON_CANCELED = 3, /* rd_session_cancel */
    RD_REASON_CALLBACK = 4, /* the token callback returned nonzero */
    RD_REASON_ERROR = 5     /* an error ended it (the status says which) */
};

/* The library's version (compare major with REDRAFTER_VERSION_MAJOR).
 * Thread-safe. */
rd_status rd_version(int32_t *major, int32_t *minor, int32_t *patch, char **err);

/* Releases anything the library returned through a pointer: an error
 * string, a token array, a text, a result's text. NULL is ignored. The one
 * function that returns no status. Thread-safe. */
void rd_free(void *p);

/* ---- engines ---------------------------------------------------------- */

typedef struct rd_load_options {
    uint32_t struct_size;  /* sizeof(rd_load_options): set by rd_load_options_init */
    const char *backend;   /* "auto" (NULL too), "cpu" or "metal" */
    int32_t threads;       /* >0: worker threads of this engine's CPU backend
                              (at most 4 per core, else RD_ERR_ARGUMENT);
                              0: all cores */
    int32_t context;       /* tokens a session holds, at most the model's
                              (else RD_ERR_ARGUMENT); 0: the model's */
    const char *kv_cache;  /* "f32", "f16", or NULL for the backend's default */
    const char *drafter;   /* ReDrafter draft head directory, or NULL for none */
    int32_t beam_width;    /* ReDrafter beams per step; 0: the backend's default */
    int32_t beam_length;   /* ReDrafter tokens per beam (>= 2); 0: the default */
} rd_load_options;

/* Fills opts with the defaults. Thread-safe. */
rd_status rd_load_options_init(rd_load_options *opts, char **err);

/* Loads a model (a .gguf file or an HF checkpoint directory) and, when
 * opts->drafter is set, its draft head. opts may be NULL (the defaults).
 * On success *out is the new engine. Thread-safe. */
rd_status rd_engine_load(const char *model_path, const rd_load_options *opts,
                         rd_engine *out, char **err);

/* Frees the engine. RD_ERR_BUSY while any of its sessions is not freed.
 * Must not run concurrently with another call on the same engine. */
rd_status rd_engine_free(rd_engine engine, char **err);

/* The number of tokens a session can hold. Thread-safe. */
rd_status rd_engine_context(rd_engine engine, int32_t *out, char **err);

/* Tokenizes text; add_bos prepends the BOS token. *tokens (rd_free) holds
 * *n_tokens ids. Thread-safe. */
rd_status rd_tokenize(rd_engine engine, const char *text, int32_t add_bos,
                      int32_t **tokens, size_t *n_tokens, char **err);

/* Turns ids into text (*text, rd_free). An id outside the vocabulary, or
 * n_tokens above 2^24, is RD_ERR_ARGUMENT. Thread-safe. */
rd_status rd_detokenize(rd_engine engine, const int32_t *tokens, size_t n_tokens,
                        char **text, char **err);

/* ---- sessions ---------------------------------------------------------- */

/* A session is one conversation with its KV cache: a generation reuses the
 * cached prefix it shares with the previous one. Sessions of one engine may
 * generate on different threads at once. */

/* Creates a session. Thread-safe. */
rd_status rd_session_new(rd_engine engine, rd_session *out, char **err);

/* Frees the session. RD_ERR_BUSY while it generates on another thread. */
rd_status rd_session_free(rd_session session, char **err);

typedef struct rd_generate_options {
    uint32_t struct_size;     /* sizeof(rd_generate_options): set by rd_generate_options_init */
    int32_t max_tokens;       /* stop after this many new tokens; 0: until the context is full */
    float temperature;        /* 0: greedy */
    int32_t top_k;            /* 0: all tokens */
    float top_p;              /* in [0, 1]; 1: all tokens; 0: the most probable token only */
    uint64_t seed;            /* the same seed gives the same sampled text */
    const char *const *stop;  /* n_stop stop strings, or NULL */
    size_t n_stop;
    int32_t no_draft;         /* nonzero: decode without the draft head */
} rd_generate_options;

/* Fills opts with the defaults: greedy, 256 tokens, the draft head on.
 * Thread-safe. */
rd_status rd_generate_options_init(rd_generate_options *opts, char **err);

/* Statistics of one generation. */
typedef struct rd_stats {
    int32_t prompt_tokens;     /* tokens the prefill ran (after reusing the cache) */
    int32_t generated_tokens;
    double prefill_seconds;
    double decode_seconds;
    double tokens_per_second;  /* generated tokens per second of decoding */
    int32_t draft_steps;       /* ReDrafter verification steps; 0 without a draft head */
    double tokens_per_step;    /* tokens per ReDrafter step; 0 without a draft head */
    int32_t beam_width, beam_length; /* the beam used; 0 without a draft head */
} rd_stats;

typedef struct rd_result {
    char *text;        /* everything generated (rd_free) */
    rd_reason reason;
    rd_stats stats;
} rd_result;

/* Receives the text as it is produced: piece holds len bytes (and a NUL
 * after them) that never split a UTF-8 character; it is valid only during
 * the call. Return 0 to go on, nonzero to stop (reason RD_REASON_CALLBACK).
 * It runs on the thread that called rd_session_generate, and must not call
 * back into the same session. */
typedef int32_t (*rd_token_callback)(const char *piece, size_t len, void *user_data);

/* Continues the session with prompt (the BOS token first). opts may be NULL
 * (the defaults), callback may be NULL. On RD_OK or RD_ERR_GENERATE, *result
 * (when result is not NULL) is filled and its text is the caller's to
 * rd_free. A stop by rd_session_cancel or by the callback is RD_OK with its
 * reason. One thread at a time per session: a second concurrent call is
 * RD_ERR_BUSY. */
rd_status rd_session_generate(rd_session session, const char *prompt,
                              const rd_generate_options *opts,
                              rd_token_callback callback, void *user_data,
                              rd_result *result, char **err);

/* Stops the session's generation in progress, if any, before its next
 * decoding step (with a draft head, a step may still deliver the rest of
 * its accepted tokens). Thread-safe: meant to be called from another thread. */
rd_status rd_session_cancel(rd_session session, char **err);

/* One chat message; role is "system", "user" or "assistant". */
typedef struct rd_message {
    const char *role;
    const char *content;
} rd_message;

/* Renders messages with a chat template ("model": the model's own Jinja
 * template; "vicuna", "llama2", "chatml", "llama3"; or NULL / "auto": the
 * model's own, else vicuna) followed by the opening of the assistant's
 * turn, to show: special-token text ("</s>") in it is a token where the
 * template wrote it, and plain text where a message did. *prompt is
 * rd_free'd. Thread-safe. */
rd_status rd_chat_render(rd_engine engine, const rd_message *messages, size_t n_messages,
                         const char *template_name, char **prompt, char **err);

/* Generates the assistant's reply to messages, rendered as rd_chat_render
 * does: the template's markup becomes special tokens, and the messages'
 * content is plain text ("</s>" or "<|im_start|>" in a message cannot end a
 * turn or forge one). Re-send the whole
 * conversation each turn: the session's cache keeps what is unchanged.
 * Otherwise as rd_session_generate. */
rd_status rd_session_chat(rd_session session, const rd_message *messages, size_t n_messages,
                          const char *template_name, const rd_generate_options *opts,
                          rd_token_callback callback, void *user_data,
                          rd_result *result, char **err);

#ifdef __cplusplus
}
#endif

#endif /* REDRAFTER_H */
