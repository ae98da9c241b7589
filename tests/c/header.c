/*
 * Compiled, not run, by tests/clib_test.go: redrafter.h must build on its
 * own as C99 and as C++ with -Wall -Wextra -Werror -pedantic. Every type
 * and constant is used so that a mistake in any of them shows.
 */
#include "redrafter.h"

int use_every_name(void);

int use_every_name(void) {
    rd_status st = RD_OK + RD_ERR_ARGUMENT + RD_ERR_HANDLE + RD_ERR_LOAD + RD_ERR_BUSY +
                   RD_ERR_GENERATE + RD_ERR_INTERNAL;
    rd_reason why = RD_REASON_EOS + RD_REASON_STOP + RD_REASON_LENGTH + RD_REASON_CANCELED +
                    RD_REASON_CALLBACK + RD_REASON_ERROR;
    rd_engine engine = 0;
    rd_session session = 0;
    rd_load_options lo;
    rd_generate_options go;
    rd_stats stats;
    rd_result result;
    rd_message message;
    rd_token_callback callback = 0;
    lo.struct_size = REDRAFTER_VERSION_MAJOR + REDRAFTER_VERSION_MINOR + REDRAFTER_VERSION_PATCH;
    go.struct_size = lo.struct_size;
    stats.draft_steps = 0;
    result.stats = stats;
    message.role = "user";
    message.content = "hi";
    (void)callback;
    (void)message;
    (void)result;
    (void)go;
    return (int)(st + why + (int32_t)engine + (int32_t)session);
}
