/*
 * route.c: Redis Cluster routing of the shard-server's links (rlink.h), of both kinds.
 *
 * The links start on the server of the --redis URL. A plain Redis never answers MOVED or ASK, so
 * nothing here ever runs. A cluster node does, for a key whose slot another master serves: the first
 * such reply creates the slot map, the redirection's node is recorded as the slot's owner, and the
 * whole map is re-read (CLUSTER SLOTS on the route's `via` link, at most once a second). From then on
 * each link sends a command to its twin on the master of the command's key (a link of the same kind,
 * opened on first use with the URL's credentials): the control FCALLs to the master of {R}, the blob
 * GET/SET/DEL of shard k to the master of {R:k}. ASK redirections (a slot being migrated) are followed
 * once with ASKING and leave the map unchanged.
 * The transports (cmd.c, set.c) call here to route and to follow a redirection; route.c calls nothing
 * above it: a twin is opened, and CLUSTER SLOTS sent, through the pointers rlink_route_attach (rlink.c)
 * sets in the route.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"

#define ROUTE_REFRESH_MIN_MS 1000

void rl_route_free(rlink_route *rt)
{
    free(rt->map);
    rt->map = NULL;
}

int rl_route_node(const rlink_route *rt, int slot)
{
    return rt != NULL && rt->map != NULL ? cluster_map_owner(rt->map, slot) : -1;
}

static void on_slots(redisReply *r, void *priv)
{
    rlink_route *rt = priv;
    rt->refreshing = 0;
    char err[256];
    if (r == NULL) return;
    if (cluster_map_load(rt->map, r, rt->via->target.host, err, sizeof err) != 0)
        log_warn("redis cluster: %s; routing by the redirections seen so far", err);
    else
        log_info("redis cluster: slot map read, %d masters", rt->map->nnodes);
}

/* Record a redirection; the node to send the command to, or -1. MOVED also re-reads the map. */
static int route_learn(rlink_route *rt, const cluster_redirect *rd)
{
    if (rt->map == NULL) {
        rt->map = malloc(sizeof *rt->map);
        if (rt->map == NULL) return -1;
        cluster_map_init(rt->map);
        log_info("redis is a cluster (%s %d %s:%d): routing by hash slot", rd->ask ? "ASK" : "MOVED", rd->slot,
                 rd->host, rd->port);
    }
    int node = cluster_map_node(rt->map, rd->host, rd->port);
    if (node < 0 || rd->ask) return node;
    rt->map->owner[rd->slot] = (int16_t)node;
    uint64_t now = now_ms();
    if (!rt->refreshing && now - rt->refreshed_ms >= ROUTE_REFRESH_MIN_MS) {
        const char *argv[2] = {"CLUSTER", "SLOTS"};
        if (rt->send(rt->via, on_slots, rt, 2, argv) == 0) {
            rt->refreshing = 1;
            rt->refreshed_ms = now;
        }
    }
    return node;
}

void rl_route_forget(rlink_route *rt)
{
    if (rt->map == NULL) return;
    for (int i = 0; i < CLUSTER_SLOTS; i++) rt->map->owner[i] = -1;
}

/* 1 if node is the URL's server itself, else 0 and *out = the URL with the node's address. */
static int route_node_url(const rlink_route *rt, int node, const redis_url *seed, redis_url *out)
{
    const cluster_node *n = &rt->map->node[node];
    if (!seed->is_unix && seed->port == n->port && strcmp(seed->host, n->host) == 0) return 1;
    *out = *seed;
    out->is_unix = 0;
    out->db = 0;
    snprintf(out->host, sizeof out->host, "%s", n->host);
    out->port = n->port;
    return 0;
}

/* Whether l is on `node` is asked each time, never cached: a link of a seed list (redis://h1,h2,...)
 * connects to whichever seed answers first, and moves when its group does (state.c: a CLUSTERDOWN
 * reply during a failover makes a link ask the seeds again, and the others follow the one that
 * answered), so the node it stood on may be another's later. Cached, l would stay that node's twin after it moved: a command for
 * that node's slots would go to l, whose node answers MOVED to it, back to l, and so on until the hops
 * run out, for as long as l stays where it is (it_ha_cluster_failover saw a shard's load fail so for a
 * minute after a failover moved the bulk link off a node that stayed up). */
rlink *rl_route_twin(rlink *l, int node)
{
    if (node < 0) return l;
    redis_url url;
    if (route_node_url(l->route, node, &l->target, &url)) return l;
    if (l->twin[node] != NULL) return l->twin[node];
    rlink *t = l->route->open_twin(l, &url);
    if (t == NULL) return NULL;
    return l->twin[node] = t;
}

int rl_route_redirect(rlink *owner, const redisReply *reply, const char *host_asked, int hops, rlink **to, int *ask)
{
    cluster_redirect rd;
    if (owner->route == NULL || hops >= CLUSTER_MAX_HOPS || !cluster_reply_redirect(reply, host_asked, &rd)) return 0;
    int node = route_learn(owner->route, &rd);
    *to = node >= 0 ? rl_route_twin(owner, node) : NULL;
    *ask = rd.ask;
    return 1;
}
