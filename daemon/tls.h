/*
 * tls — the TLS context of the TLS listeners: certificate, key, the CA that
 * client certificates must be signed by, protocol versions.
 *
 * tls_create() loads the files the tls.* settings name and checks them (the
 * key matches the certificate); what is wrong is added to the config's
 * errors, at the place of the setting, so that dlockd -t says it. A reload
 * builds a new one; each connection keeps the context it started with.
 */
#ifndef DLOCKD_TLS_H
#define DLOCKD_TLS_H

#include <stdint.h>

struct conf;
struct ssl_st;
struct tls;

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
/* OpenSSL's reason for the error code e, as a sentence (static). */
const char *tls_error_text(unsigned long e);

#endif
