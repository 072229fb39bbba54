/*
 * test_ss_route.c: which link a shard-server command goes out on in a Redis Cluster
 * (shard-server/link/route.c's rl_route_twin), without a server: the slot map and the links are built
 * by hand, and the route's open_twin hands out numbered links instead of connecting.
 *
 * The case it pins: a link of a seed-list URL connects to whichever seed answers first and moves when
 * its group does. It must then stop being the link of the node it left: it_ha_cluster_failover once
 * saw a shard-server whose bulk link had been cached as its own twin on a node it no longer stood on,
 * so every blob read of that node's slots went back to it, got MOVED to that node, and back again,
 * failing for a minute after a failover.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "link/internal.h"

static rlink twins[4];
static int opened;

static rlink *open_numbered_twin(rlink *l, const redis_url *url)
{
    (void)l;
    assert_true(opened < 4);
    rlink *t = &twins[opened++];
    t->target = *url;
    return t;
}

typedef struct fixture {
    cluster_map map;
    rlink_route route;
    rlink link;
    int a, b; /* node indexes of 127.0.0.1:7001 and :7002 */
} fixture;

static void on_node(rlink *l, int port)
{
    memset(&l->target, 0, sizeof l->target);
    snprintf(l->target.host, sizeof l->target.host, "127.0.0.1");
    l->target.port = port;
}

static fixture *make_fixture(void)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    cluster_map_init(&f->map);
    f->a = cluster_map_node(&f->map, "127.0.0.1", 7001);
    f->b = cluster_map_node(&f->map, "127.0.0.1", 7002);
    f->route.map = &f->map;
    f->route.open_twin = open_numbered_twin;
    f->link.route = &f->route;
    opened = 0;
    memset(twins, 0, sizeof twins);
    return f;
}

static void a_link_is_its_own_node_and_a_twin_elsewhere(void **state)
{
    (void)state;
    fixture *f = make_fixture();
    on_node(&f->link, 7001);
    assert_ptr_equal(rl_route_twin(&f->link, -1), &f->link);
    assert_ptr_equal(rl_route_twin(&f->link, f->a), &f->link);
    rlink *tb = rl_route_twin(&f->link, f->b);
    assert_ptr_equal(tb, &twins[0]);
    assert_int_equal(tb->target.port, 7002);
    assert_ptr_equal(rl_route_twin(&f->link, f->b), tb); /* opened once */
    assert_int_equal(opened, 1);
    free(f);
}

static void a_link_that_moved_is_no_longer_the_node_it_left(void **state)
{
    (void)state;
    fixture *f = make_fixture();
    on_node(&f->link, 7001);
    assert_ptr_equal(rl_route_twin(&f->link, f->a), &f->link);
    on_node(&f->link, 7002); /* its group moved it to 7002 (state.c) */
    rlink *ta = rl_route_twin(&f->link, f->a);
    assert_ptr_not_equal(ta, &f->link); /* 7001's slots go to a link on 7001, not to 7002 */
    assert_non_null(ta);
    assert_int_equal(ta->target.port, 7001);
    assert_ptr_equal(rl_route_twin(&f->link, f->b), &f->link); /* and 7002's to the link itself */
    free(f);
}

static void a_link_that_comes_back_uses_itself_again(void **state)
{
    (void)state;
    fixture *f = make_fixture();
    on_node(&f->link, 7001);
    rlink *tb = rl_route_twin(&f->link, f->b);
    assert_ptr_equal(tb, &twins[0]);
    on_node(&f->link, 7002);
    assert_ptr_equal(rl_route_twin(&f->link, f->b), &f->link); /* on 7002 itself now: no detour */
    on_node(&f->link, 7001);
    assert_ptr_equal(rl_route_twin(&f->link, f->a), &f->link);
    assert_ptr_equal(rl_route_twin(&f->link, f->b), tb); /* the twin opened before serves again */
    assert_int_equal(opened, 1);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_link_is_its_own_node_and_a_twin_elsewhere),
        cmocka_unit_test(a_link_that_moved_is_no_longer_the_node_it_left),
        cmocka_unit_test(a_link_that_comes_back_uses_itself_again),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
