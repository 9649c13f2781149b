/*
 * tls.h: TLS (and mutual TLS) on the gRPC port, terminated by the daemon.
 *
 * The daemon accepts connections itself (listen.h) and hands each socket
 * to the gRPC core, whose fd hand-over (gRPC 1.51) takes insecure
 * credentials only. So with --tls-cert the daemon runs TLS itself: each
 * accepted connection gets a bridge thread that does the handshake with
 * OpenSSL and copies bytes between the TLS connection and one end of a
 * socketpair, whose other end the core serves as a plain HTTP/2
 * connection. The listener's connection cap and descriptor recovery keep
 * working (the accepted socket is still the one counted), and the bridge
 * threads are as many as the open connections, at most max-connections.
 *
 * ALPN "h2" is selected (gRPC clients require it). With a client CA
 * (--tls-client-ca) a client must present a certificate it signed, else
 * the handshake fails and the connection is closed.
 *
 * Slow peers (tls_set_limits): the whole handshake has a deadline, not a
 * socket timeout that every byte restarts, so a peer trickling its
 * handshake cannot hold a slot of the connection cap; and a bridged peer
 * that takes no bytes for a while is dropped, since the bridge, not the
 * core, would wait for it. Idle connections are the core's to close: the
 * bridge ends as soon as the core closes its end.
 */
#ifndef DAEMON_TLS_H
#define DAEMON_TLS_H

#include <stddef.h>

typedef struct tls_server tls_server;

/* Loads the certificate chain and key (PEM), and the client CA when given
 * (NULL or "": no client certificates asked). NULL and a message on
 * error. */
tls_server *tls_new(const char *cert, const char *key, const char *client_ca,
                    char *err, size_t errlen);
void tls_free(tls_server *t);

/* A connection's handshake must be done within handshake_ms, all of it
 * (default 10 s; <= 0 keeps it); once bridged, bytes for the peer may wait
 * at most stall_ms without any being taken before the connection is
 * closed (0: no limit, the default). Before connections are bridged. */
void tls_set_limits(tls_server *t, int handshake_ms, int stall_ms);

/* Starts a bridge thread between accepted socket tcp_fd and plain_fd;
 * both belong to the bridge, which closes them when either side ends.
 * Returns 0, or -1 (both closed) when no thread could start. */
int tls_bridge(tls_server *t, int tcp_fd, int plain_fd);

/* The client side, for Redis over TLS (l2.h): connects to host:port within
 * timeout_ms, does the handshake verifying the server's certificate
 * against `ca` (a PEM file; NULL or "": the system's roots) and `host`
 * (a name or an IP address), and bridges the connection in a thread to one
 * end of a socketpair. Returns the other end (a plain socket), or -1 with a
 * message. */
int tls_client_connect(const char *host, int port, const char *ca,
                       int timeout_ms, char *err, size_t errlen);

#endif
