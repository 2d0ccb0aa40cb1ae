/*
 * tls — the daemon's TLS contexts: the listeners' (struct tls: certificate,
 * key, the CA that client certificates must be signed by, protocol versions)
 * and the backends' client side (struct tls_client: the CAs servers are
 * verified against, an optional client certificate).
 *
 * tls_create() loads the files the tls.* settings name and checks them (the
 * key matches the certificate); what is wrong is added to the config's
 * errors, at the place of the setting, so that dlockd -t says it. A reload
 * builds a new one; each connection keeps the context it started with.
 *
 * tls_client_create() does the same for a client context, saying what is
 * wrong in one line for the caller to report. A context is reference
 * counted, and each SSL made from it holds the OpenSSL context too: a
 * backend replaced by a reload may drop its reference while its connections
 * finish.
 */
#ifndef DLOCKD_TLS_H
#define DLOCKD_TLS_H

#include <stdint.h>

#include <stddef.h>

struct bufferevent;
struct conf;
struct ssl_st;
struct tls;
struct tls_client;	/* a client SSL_CTX, reference counted */

/* A context from c's tls.* settings (c is finished, without errors). NULL
 * after adding to c's errors what is wrong. The caller owns it
 * (tls_destroy). */
struct tls *tls_create(struct conf *c) __attribute__((warn_unused_result));
void tls_destroy(struct tls *t);
/* A new server-side SSL of t's context; the caller owns it (SSL_free, or
 * the bufferevent it is given to). Aborts when out of memory. */
struct ssl_st *tls_new_ssl(const struct tls *t);
/* How long a handshake may take, in ms (tls.handshake_timeout_ms). */
uint64_t tls_handshake_ms(const struct tls *t);
/* One line about t's certificate for the log: subject, expiry. */
const char *tls_describe(const struct tls *t);
/* Why the TLS of bev (an OpenSSL bufferevent) failed, for the log: the
 * peer's certificate not verified, or OpenSSL's reasons libevent kept
 * (emptied); written into buf and returned. NULL when there is none (a
 * socket error or a close: the caller says which). */
const char *tls_bev_failure(struct bufferevent *bev, char *buf, size_t size);
/* OpenSSL's reason for the error code e, as a sentence (static). */
const char *tls_error_text(unsigned long e);

/* A client context: verifies servers against the PEM CA bundle ca_file, or,
 * when ca_file is NULL, the system's CA store (OpenSSL's default paths, so
 * SSL_CERT_FILE / SSL_CERT_DIR work); presents cert_file + key_file (PEM) when
 * both are given (a client certificate; one without the other is an error).
 * TLS 1.2 at least. NULL on failure, with a one-line reason (file named,
 * OpenSSL's reason) in why[whylen]. Reads files: call at start-up or on
 * reload, never from the event loop otherwise. The caller owns the one
 * reference it returns. */
struct tls_client *tls_client_create(const char *ca_file, const char *cert_file,
    const char *key_file, char *why, size_t whylen) __attribute__((warn_unused_result));
/* Take one more reference to tc. */
void tls_client_ref(struct tls_client *tc);
/* Drop one reference to tc, freeing it with the last (the SSLs made from it
 * live on: each holds the OpenSSL context). */
void tls_client_unref(struct tls_client *tc);	/* NULL is fine */
/* A new client SSL of tc's context that verifies the server's certificate
 * against name: a DNS name is sent as SNI and checked against the
 * certificate's names (X509_VERIFY_PARAM_set1_host, no partial wildcards); an
 * IPv4/IPv6 address literal (without brackets) is checked against its IP
 * SANs (set1_ip_asc) and sent without SNI; an empty or NULL name matches no
 * certificate. The caller owns it (SSL_free, or the bufferevent it is given
 * to). SSL_VERIFY_PEER: a handshake with a server that fails verification
 * fails. Aborts when out of memory. */
struct ssl_st *tls_client_new_ssl(struct tls_client *tc, const char *name);
/* Why the client handshake on ssl failed, one line for the log and for a
 * client-visible error: when the certificate was not verified,
 * "certificate not verified: " + X509_verify_cert_error_string(SSL_get_verify_result)
 * (e.g. "unable to get local issuer certificate", "hostname mismatch");
 * else OpenSSL's error queue (emptied) as tls_reasons() does, or "connection
 * closed during the TLS handshake" if empty. Written into buf, which is
 * returned. Call it right after the failure, on the thread that saw it: the
 * error queue is the thread's (a bufferevent_openssl moves it into its own,
 * see bufferevent_get_openssl_error). */
const char *tls_client_failure(struct ssl_st *ssl, char *buf, size_t len);

#endif
