/* http_deadline.h: a deadline for each HTTP connection of `coordinator serve` to deliver its request.
 *
 * evhttp's timeout (30 s) starts again at every byte, so a client that sends its request a byte at a time
 * (slowloris) held a connection, and a descriptor, for ever; enough of them and serve accepts nothing more.
 * Each connection now has HTTP_REQUEST_DEADLINE_S from its accept to deliver a whole request (headers and body),
 * after which its socket is shut down (evhttp then sees the end of the stream and frees the connection itself).
 * A connection serves one request (serve answers `Connection: close`), so the deadline covers all it does. */
#ifndef DILOCO_COORD_HTTP_DEADLINE_H
#define DILOCO_COORD_HTTP_DEADLINE_H

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
