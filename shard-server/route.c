/*
 * route.c: Redis Cluster routing of the shard-server's asynchronous connections (rasync.c, rawset.c).
 *
 * The shard-server's three connections (control, bulk, bulk-write) start on the server of the
 * --redis URL. A plain Redis never answers MOVED or ASK, so nothing here ever runs. A cluster node
 * does, for a key whose slot another master serves: the first such reply creates the slot map, the
 * redirection's node is recorded as the slot's owner, and the whole map is re-read (CLUSTER SLOTS on
 * the bulk connection, at most once a second). From then on each connection sends a command to its
 * twin connection on the master of the command's key (rasync.c / rawset.c open one per node, on
 * first use, with the URL's credentials): the control FCALLs to the master of {R}, the blob
 * GET/SET/DEL of shard k to the master of {R:k}. ASK redirections (a slot being migrated) are
 * followed once with ASKING and leave the map unchanged.
 */
#include "ss.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define ROUTE_REFRESH_MIN_MS 1000

void route_attach(ss_ctx *ss)
{
    ss->route.via = &ss->bulk;
    ss->ctl.route = ss->bulk.route = ss->bulkw.route = &ss->route;
}

int route_node(const ss_route *rt, int slot)
{
    return rt != NULL && rt->map != NULL ? cluster_map_owner(rt->map, slot) : -1;
}

static void on_slots(redisReply *r, void *priv)
{
    ss_route *rt = priv;
    rt->refreshing = 0;
    char err[256];
    if (r == NULL)
        return;
    if (cluster_map_load(rt->map, r, rt->via->url->host, err, sizeof err) != 0)
        log_warn("redis cluster: %s; routing by the redirections seen so far", err);
    else
        log_info("redis cluster: slot map read, %d masters", rt->map->nnodes);
}

int route_learn(ss_route *rt, const cluster_redirect *rd)
{
    if (rt->map == NULL) {
        rt->map = malloc(sizeof *rt->map);
        if (rt->map == NULL)
            return -1;
        cluster_map_init(rt->map);
        log_info("redis is a cluster (%s %d %s:%d): routing by hash slot", rd->ask ? "ASK" : "MOVED", rd->slot,
                 rd->host, rd->port);
    }
    int node = cluster_map_node(rt->map, rd->host, rd->port);
    if (node < 0 || rd->ask)
        return node;
    rt->map->owner[rd->slot] = (int16_t)node;
    uint64_t now = now_ms();
    if (!rt->refreshing && now - rt->refreshed_ms >= ROUTE_REFRESH_MIN_MS) {
        const char *argv[2] = { "CLUSTER", "SLOTS" };
        if (ra_cmds(rt->via, on_slots, rt, 2, argv) == 0) {
            rt->refreshing = 1;
            rt->refreshed_ms = now;
        }
    }
    return node;
}

int route_node_url(const ss_route *rt, int node, const redis_url *seed, redis_url *out)
{
    const cluster_node *n = &rt->map->node[node];
    if (!seed->is_unix && seed->port == n->port && strcmp(seed->host, n->host) == 0)
        return 1;
    *out = *seed;
    out->is_unix = 0;
    out->db = 0;
    snprintf(out->host, sizeof out->host, "%s", n->host);
    out->port = n->port;
    return 0;
}
