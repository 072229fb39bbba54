/* http_deadline.h: a deadline for each connection of an evhttp server (`coordinator serve --http`, a
 * shard-server's --metrics) to deliver its request.
 *
 * evhttp's timeout starts again at every byte, so a client that sends its request a byte at a time
 * (slowloris) held a connection, and a descriptor, for ever; enough of them and the server accepts nothing more.
 * Each connection now has HTTP_REQUEST_DEADLINE_S from its accept to deliver a whole request (headers and body),
 * after which its socket is shut down (evhttp then sees the end of the stream and frees the connection itself).
 * The deadline covers a connection's first request only: a server that uses it answers `Connection: close`,
 * so that a connection serves one request. Here in common/net/ (libevent, as accept_guard) for both. */
#ifndef DILOCO_NET_HTTP_DEADLINE_H
#define DILOCO_NET_HTTP_DEADLINE_H

#include <event2/http.h>

#define HTTP_REQUEST_DEADLINE_S 10

typedef struct http_deadlines http_deadlines;

/* Watch every connection http accepts from now on (evhttp_set_bevcb). NULL when out of memory. */
http_deadlines *http_deadlines_new(struct evhttp *http, struct event_base *base);
/* req arrived whole: its connection's deadline is over. */
void http_deadlines_met(http_deadlines *d, struct evhttp_request *req);
/* Connections cut so far. */
unsigned long http_deadlines_cut(const http_deadlines *d);
/* Before evhttp_free: every watch ends (their sockets are left to evhttp). */
void http_deadlines_free(http_deadlines *d);

#endif
