/* gpt_data.c: the token file (prepare-data) and its loader. */
#include "base/file_atomic.h"
#include "base/opts.h"
#include "base/util.h"
#include "gpt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

int gpt_tokens_load(const char *path, gpt_tokens *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_set(err, errlen, "token file %s: %s", path, strerror(errno));
        return -1;
    }
    unsigned char h[GPT_TOKEN_HEADER];
    if (fread(h, 1, sizeof h, f) != sizeof h || memcmp(h, GPT_TOKEN_MAGIC, 8) != 0) {
        err_set(err, errlen, "token file %s: not a token file (bad magic; make it with prepare-data)", path);
        fclose(f);
        return -1;
    }
    uint32_t ver = get32(h + 8), tb = get32(h + 12);
    uint64_t n = get64(h + 16), ntrain = get64(h + 24);
    uint32_t vocab = get32(h + 32);
    if (ver != GPT_TOKEN_VERSION || tb != 2 || ntrain > n || n > (1ULL << 40)) {
        err_set(err, errlen, "token file %s: unsupported version %u / token size %u or bad counts", path, ver, tb);
        fclose(f);
        return -1;
    }
    out->tok = malloc(n ? n * 2 : 2);
    if (!out->tok) {
        err_set(err, errlen, "token file %s: out of memory", path);
        fclose(f);
        return -1;
    }
    unsigned char *raw = (unsigned char *)out->tok;
    if (fread(raw, 2, n, f) != n) {
        err_set(err, errlen, "token file %s: truncated (expected %llu tokens)", path, (unsigned long long)n);
        fclose(f);
        gpt_tokens_free(out);
        return -1;
    }
    fclose(f);
    for (uint64_t i = 0; i < n; i++) {
        out->tok[i] = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8); /* little-endian on any host */
        if (out->tok[i] >= vocab) {
            err_set(err, errlen, "token file %s: token %u at %llu >= vocab %u", path, out->tok[i],
                    (unsigned long long)i, vocab);
            gpt_tokens_free(out);
            return -1;
        }
    }
    out->ntokens = n;
    out->ntrain = ntrain;
    out->vocab = vocab;
    return 0;
}

void gpt_tokens_free(gpt_tokens *t)
{
    free(t->tok);
    memset(t, 0, sizeof *t);
}

/* The whole of file `input` into *buf (malloc'ed, *n bytes): 0, or -1 with err. */
static int read_input(const char *input, unsigned char **buf, size_t *n, char *err, size_t errlen)
{
    FILE *f = fopen(input, "rb");
    if (!f) {
        err_set(err, errlen, "%s: %s", input, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 20, len = 0;
    unsigned char *b = malloc(cap);
    for (;;) {
        if (!b) {
            fclose(f);
            err_set(err, errlen, "out of memory");
            return -1;
        }
        size_t r = fread(b + len, 1, cap - len, f);
        len += r;
        if (len < cap) break;
        cap *= 2;
        unsigned char *nb = realloc(b, cap);
        if (!nb) free(b);
        b = nb;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) {
        free(b);
        err_set(err, errlen, "%s: read error", input);
        return -1;
    }
    *buf = b;
    *n = len;
    return 0;
}

/* The header of a token file of n byte-level tokens, the first ntrain of them the training split. */
static void token_header(unsigned char h[GPT_TOKEN_HEADER], uint64_t n, uint64_t ntrain)
{
    memset(h, 0, GPT_TOKEN_HEADER);
    memcpy(h, GPT_TOKEN_MAGIC, 8);
    put32(h + 8, GPT_TOKEN_VERSION);
    put32(h + 12, 2);
    put64(h + 16, n);
    put64(h + 24, ntrain);
    put32(h + 32, 256);
}

/* Each of the n bytes as a 16-bit little-endian token (malloc'ed, 2n bytes), or NULL. */
static unsigned char *bytes_to_tokens(const unsigned char *buf, size_t n)
{
    unsigned char *tokens = malloc(2 * n);
    if (!tokens) return NULL;
    for (size_t i = 0; i < n; i++) {
        tokens[2 * i] = buf[i];
        tokens[2 * i + 1] = 0;
    }
    return tokens;
}

int gpt_prepare_data(const char *input, const char *output, double val_fraction, char *err, size_t errlen)
{
    if (!(val_fraction >= 0 && val_fraction < 1)) {
        err_set(err, errlen, "--val-fraction must be in [0, 1)");
        return -1;
    }
    unsigned char *buf;
    size_t n;
    if (read_input(input, &buf, &n, err, errlen) < 0) return -1;
    if (n < 2) {
        free(buf);
        err_set(err, errlen, "%s: too short (%zu bytes)", input, n);
        return -1;
    }
    uint64_t nval = (uint64_t)(n * val_fraction), ntrain = n - nval;
    unsigned char h[GPT_TOKEN_HEADER];
    token_header(h, n, ntrain);
    unsigned char *tokens = bytes_to_tokens(buf, n);
    free(buf);
    if (!tokens) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    const file_chunk chunks[2] = {{h, sizeof h}, {tokens, 2 * n}};
    char why[512];
    int rc = file_write_atomic(output, chunks, 2, why, sizeof why);
    free(tokens);
    if (rc != 0) {
        err_set(err, errlen, "%s: %s", output, why);
        return -1;
    }
    printf("prepare-data: wrote %s: %zu byte-level tokens (vocab 256): train %llu, validation %llu (%.1f%%)\n", output,
           n, (unsigned long long)ntrain, (unsigned long long)nval, 100.0 * nval / n);
    return 0;
}

static void prepare_usage(FILE *f)
{
    fprintf(f, "usage: bin/worker prepare-data --input TEXT --output FILE.tok [--val-fraction 0.05]\n"
               "  byte-level tokens (vocab 256); the last val-fraction of the text is the validation split\n");
}

int gpt_prepare_data_main(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    double vf = 0.05;
    const opt_spec specs[] = {
        {.name = "input", .kind = OPT_STRING, .dest = &in},
        {.name = "output", .kind = OPT_STRING, .dest = &out},
        {.name = "val-fraction", .kind = OPT_DOUBLE, .dest = &vf, .min = 0, .max = 1, .wants = "a fraction in [0, 1)"},
        {0},
    };
    int rc = opts_parse_cmd("prepare-data", prepare_usage, specs, argc, argv, 1, NULL, NULL);
    if (rc != 0) return opts_exit_status(rc);
    if (!in || !out) {
        fprintf(stderr, "prepare-data: --input and --output are required (see --help)\n");
        return OPTS_EXIT_USAGE;
    }
    char err[512];
    if (gpt_prepare_data(in, out, vf, err, sizeof err)) {
        fprintf(stderr, "prepare-data: %s\n", err);
        return 1;
    }
    return 0;
}
