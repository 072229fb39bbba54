/*
 * test_cluster_slot.c: Redis Cluster routing without a server (common/redis/cluster.c): CRC16/XMODEM and
 * hash slots against the values of the Redis Cluster specification, hash tags, the key of each kind
 * of command we send (plain and RESP-encoded), MOVED/ASK parsing, and the slot map built from a
 * CLUSTER SLOTS reply.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "redis/cluster.h"

static int slot(const char *key)
{
    return cluster_key_slot(key, strlen(key));
}

static void crc16_matches_the_spec(void **state)
{
    (void)state;
    assert_int_equal(cluster_crc16("123456789", 9), 0x31C3);
    assert_int_equal(cluster_crc16("", 0), 0);
}

static void slots_match_the_spec(void **state)
{
    (void)state;
    assert_int_equal(slot("foo"), 12182);
    assert_int_equal(slot("bar"), 5061);
    assert_int_equal(slot("{user1000}.following"), slot("{user1000}.followers"));
    assert_int_equal(slot("{user1000}.following"), slot("user1000"));
    /* only the first {...} counts, and an empty one is no tag */
    assert_int_equal(slot("foo{bar}{zap}"), slot("bar"));
    assert_int_equal(slot("foo{{bar}}zap"), slot("{bar"));
    assert_int_equal(slot("foo{}{bar}"), cluster_crc16("foo{}{bar}", 10) & 16383);
    assert_int_equal(slot("foo{bar"), cluster_crc16("foo{bar", 7) & 16383);
}

static void our_keys_share_the_run_tag(void **state)
{
    (void)state;
    int run = slot("dl:{exact}:config");
    assert_int_equal(slot("dl:{exact}:state"), run);
    assert_int_equal(slot("dl:{exact}:wake:w1"), run);
    assert_int_equal(slot("dl:{exact}:f0:r12"), run);
    assert_int_equal(slot("dl:{exact:3}:snap:0:0"), slot("exact:3"));
    assert_int_equal(slot("dl:{exact:3}:log:7:2"), slot("dl:{exact:3}:snap:0:0"));
    /* shards of one run spread over slots */
    assert_int_not_equal(slot("dl:{exact:0}:snap:0:0"), slot("dl:{exact:1}:snap:0:0"));
}

static int argv_slot(int argc, const char **argv)
{
    return cluster_command_slot(argc, argv, NULL);
}

static void command_keys(void **state)
{
    (void)state;
    const char *fcall[] = {"FCALL", "dl_register", "1", "dl:{r}:config", "w1"};
    assert_int_equal(argv_slot(5, fcall), slot("r"));
    const char *fcall0[] = {"fcall_ro", "dl_version", "0"};
    assert_int_equal(argv_slot(3, fcall0), -1);
    const char *get[] = {"GET", "dl:{r:2}:snap:0:0"};
    assert_int_equal(argv_slot(2, get), slot("r:2"));
    const char *blpop[] = {"BLPOP", "dl:{r}:wake:w1", "1.000"};
    assert_int_equal(argv_slot(3, blpop), slot("r"));
    const char *load[] = {"FUNCTION", "LOAD", "REPLACE", "code"};
    assert_int_equal(argv_slot(4, load), -1);
    const char *scan[] = {"scan", "0", "MATCH", "dl:*"};
    assert_int_equal(argv_slot(4, scan), -1);
    const char *ping[] = {"PING"};
    assert_int_equal(argv_slot(1, ping), -1);
}

static void resp_command_keys(void **state)
{
    (void)state;
    const char *set = "*3\r\n$3\r\nSET\r\n$3\r\nfoo\r\n$3\r\nbar\r\n";
    assert_int_equal(cluster_resp_slot(set, strlen(set)), 12182);
    const char *fc = "*5\r\n$5\r\nFCALL\r\n$7\r\ndl_init\r\n$1\r\n1\r\n$13\r\ndl:{r}:config\r\n$1\r\nx\r\n";
    assert_int_equal(cluster_resp_slot(fc, strlen(fc)), slot("r"));
    const char *info = "*1\r\n$4\r\nINFO\r\n";
    assert_int_equal(cluster_resp_slot(info, strlen(info)), -1);
    const char *cut = "*3\r\n$3\r\nSET\r\n$10\r\nfoo\r\n";
    assert_int_equal(cluster_resp_slot(cut, strlen(cut)), -1);
    assert_int_equal(cluster_resp_slot("garbage", 7), -1);
}

static void redirections(void **state)
{
    (void)state;
    cluster_redirect r;
    assert_int_equal(cluster_parse_redirect("MOVED 3999 127.0.0.1:6381", "seed", &r), 1);
    assert_int_equal(r.ask, 0);
    assert_int_equal(r.slot, 3999);
    assert_string_equal(r.host, "127.0.0.1");
    assert_int_equal(r.port, 6381);
    assert_int_equal(cluster_parse_redirect("ASK 12182 10.0.0.5:7002", "seed", &r), 1);
    assert_int_equal(r.ask, 1);
    assert_int_equal(r.slot, 12182);
    assert_string_equal(r.host, "10.0.0.5");
    /* an unknown endpoint means "the host you asked" */
    assert_int_equal(cluster_parse_redirect("MOVED 5 :6380", "192.168.1.9", &r), 1);
    assert_string_equal(r.host, "192.168.1.9");
    assert_int_equal(r.port, 6380);
    assert_int_equal(cluster_parse_redirect("MOVED 1 ::1:7000", "seed", &r), 1);
    assert_string_equal(r.host, "::1");
    assert_int_equal(r.port, 7000);
    assert_int_equal(cluster_parse_redirect("ERR unknown command", "seed", &r), 0);
    assert_int_equal(cluster_parse_redirect("MOVED 99999 h:1", "seed", &r), 0);
    assert_int_equal(cluster_parse_redirect("MOVED 5 h", "seed", &r), 0);
    assert_int_equal(cluster_parse_redirect("MOVEDX 5 h:1", "seed", &r), 0);
    /* numbers are digits only: no sign, no blank, no port out of range */
    assert_int_equal(cluster_parse_redirect("MOVED -5 h:1", "seed", &r), 0);
    assert_int_equal(cluster_parse_redirect("MOVED  5 h:1", "seed", &r), 0);
    assert_int_equal(cluster_parse_redirect("MOVED +5 h:1", "seed", &r), 0);
    assert_int_equal(cluster_parse_redirect("MOVED 5 h:+1", "seed", &r), 0);
    assert_int_equal(cluster_parse_redirect("MOVED 5 h: 1", "seed", &r), 0);
    assert_int_equal(cluster_parse_redirect("MOVED 5 h:65536", "seed", &r), 0);
    assert_int_equal(cluster_parse_redirect("MOVED 5 h:0", "seed", &r), 0);
    assert_int_equal(cluster_parse_redirect("MOVED 5 h:99999999999999999999", "seed", &r), 0);
}

/* A hand-built CLUSTER SLOTS reply of three masters (one with a replica and an unknown endpoint). */
static redisReply *str(const char *s)
{
    static redisReply pool[64];
    static int used;
    redisReply *r = &pool[used++];
    memset(r, 0, sizeof *r);
    r->type = REDIS_REPLY_STRING;
    r->str = (char *)s;
    r->len = strlen(s);
    return r;
}

static redisReply *num(long long v)
{
    redisReply *r = str("");
    r->type = REDIS_REPLY_INTEGER;
    r->integer = v;
    return r;
}

static redisReply *arr(size_t n, redisReply **els)
{
    redisReply *r = str("");
    r->type = REDIS_REPLY_ARRAY;
    r->elements = n;
    r->element = els;
    return r;
}

static void slot_map_from_cluster_slots(void **state)
{
    (void)state;
    static redisReply *m1[3], *m2[3], *m3[3], *rep[3], *e1[3], *e2[4], *e3[3], *top[3];
    m1[0] = str("127.0.0.1"), m1[1] = num(7000), m1[2] = str("id1");
    m2[0] = str("127.0.0.1"), m2[1] = num(7001), m2[2] = str("id2");
    m3[0] = str(""), m3[1] = num(7002), m3[2] = str("id3");
    rep[0] = str("127.0.0.1"), rep[1] = num(7100), rep[2] = str("id4");
    e1[0] = num(0), e1[1] = num(5460), e1[2] = arr(3, m1);
    e2[0] = num(5461), e2[1] = num(10922), e2[2] = arr(3, m2), e2[3] = arr(3, rep);
    e3[0] = num(10923), e3[1] = num(16383), e3[2] = arr(3, m3);
    top[0] = arr(3, e1), top[1] = arr(4, e2), top[2] = arr(3, e3);
    redisReply *slots = arr(3, top);

    static cluster_map m;
    char err[128];
    cluster_map_init(&m);
    assert_int_equal(cluster_map_owner(&m, 0), -1);
    int seed = cluster_map_node(&m, "127.0.0.1", 7001); /* known before the load: keeps its index */
    assert_int_equal(cluster_map_load(&m, slots, "localhost", err, sizeof err), 0);
    assert_int_equal(m.nnodes, 3); /* the replica is not a node we route to */
    assert_int_equal(cluster_map_owner(&m, 6000), seed);
    int foo = cluster_map_owner(&m, 12182);
    assert_string_equal(m.node[foo].host, "localhost");
    assert_int_equal(m.node[foo].port, 7002);
    assert_int_equal(m.node[cluster_map_owner(&m, 0)].port, 7000);
    assert_int_equal(m.node[cluster_map_owner(&m, 5460)].port, 7000);
    assert_int_equal(cluster_map_owner(&m, 16384), -1);
    assert_int_equal(cluster_map_node(&m, "127.0.0.1", 7000), cluster_map_owner(&m, 1));

    redisReply *bad = str("ERR This instance has cluster support disabled");
    bad->type = REDIS_REPLY_ERROR;
    assert_int_equal(cluster_map_load(&m, bad, "h", err, sizeof err), -1);
    assert_non_null(strstr(err, "cluster support disabled"));
    assert_int_equal(m.node[cluster_map_owner(&m, 12182)].port, 7002); /* unchanged */

    /* a master's port outside 1..65535 (as a peer could send) is refused, the map unchanged */
    long long ports[] = {0, -1, 65536, 4294967296LL + 7000};
    for (size_t i = 0; i < sizeof ports / sizeof ports[0]; i++) {
        m3[1] = num(ports[i]);
        assert_int_equal(cluster_map_load(&m, slots, "localhost", err, sizeof err), -1);
        assert_non_null(strstr(err, "bad master"));
        assert_int_equal(m.node[cluster_map_owner(&m, 12182)].port, 7002);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crc16_matches_the_spec),      cmocka_unit_test(slots_match_the_spec),
        cmocka_unit_test(our_keys_share_the_run_tag),  cmocka_unit_test(command_keys),
        cmocka_unit_test(resp_command_keys),           cmocka_unit_test(redirections),
        cmocka_unit_test(slot_map_from_cluster_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
