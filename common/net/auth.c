/* auth.c: the run-secret challenge of the data plane (see auth.h), on OpenSSL's HMAC. */
#include "net/auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "base/util.h"
#include "format/blob.h"
#include "net/frame.h"

static void to_hex(const unsigned char *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* From getrandom(2), which needs no descriptor: a shard-server at its `ulimit -n` still has the connection it
 * accepted, and reading /dev/urandom there failed every hello (tests/test_auth.c). */
int auth_nonce(char out[AUTH_NONCE_LEN + 1])
{
    unsigned char b[AUTH_NONCE_LEN / 2];
    ssize_t got;
    while ((got = getrandom(b, sizeof b, 0)) < 0 && errno == EINTR) {}
    if (got != (ssize_t)sizeof b) return -1;
    to_hex(b, sizeof b, out);
    return 0;
}

void auth_answer(const char *secret, const char *nonce, const char *worker, const char *run, char out[AUTH_MAC_LEN + 1])
{
    char msg[512];
    int n = snprintf(msg, sizeof msg, "%s\n%s\n%s", nonce, worker, run);
    if (n < 0 || (size_t)n >= sizeof msg) n = (int)sizeof msg - 1;
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)msg, (size_t)n, mac, &len);
    to_hex(mac, len < AUTH_MAC_LEN / 2 ? len : AUTH_MAC_LEN / 2, out);
}

int auth_check(const char *secret, const char *nonce, const char *worker, const char *run, const char *answer)
{
    char want[AUTH_MAC_LEN + 1];
    auth_answer(secret, nonce, worker, run, want);
    if (strlen(answer) != AUTH_MAC_LEN) return -1;
    return CRYPTO_memcmp(want, answer, AUTH_MAC_LEN) == 0 ? 0 : -1;
}

static int exchange(int fd, blob_header *h, int timeout_ms, char *err, size_t errlen)
{
    uint8_t buf[BLOB_HEADER_MAX + 64];
    const uint8_t *payload;
    size_t plen;
    if (frame_send(fd, h, NULL, 0, timeout_ms, err, errlen) < 0) return -1;
    return frame_recv(fd, buf, sizeof buf, h, &payload, &plen, timeout_ms, err, errlen);
}

int auth_client_hello(int fd, const char *secret, const char *worker, const char *run, int timeout_ms, char *server_id,
                      size_t cap, char *err, size_t errlen)
{
    blob_header h;
    blob_header_init(&h, "hello");
    snprintf(h.worker, sizeof h.worker, "%s", worker);
    snprintf(h.text, sizeof h.text, "%s", run);
    if (exchange(fd, &h, timeout_ms, err, errlen) < 0) return -1;
    if (strcmp(h.op, "challenge") == 0) {
        char nonce[AUTH_NONCE_LEN + 1] = {0};
        memcpy(nonce, h.text, strnlen(h.text, AUTH_NONCE_LEN));
        blob_header_init(&h, "auth");
        snprintf(h.worker, sizeof h.worker, "%s", worker);
        auth_answer(secret ? secret : "", nonce, worker, run, h.text);
        if (exchange(fd, &h, timeout_ms, err, errlen) < 0) return -1;
    }
    if (strcmp(h.op, "ack") != 0) {
        err_set(err, errlen, "shard-server refused us: %s %s", h.code, h.text);
        return -1;
    }
    if (server_id) snprintf(server_id, cap, "%s", h.text);
    return 0;
}
