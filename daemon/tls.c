/*
 * tls — the daemon's TLS contexts (OpenSSL SSL_CTXs): the TLS listeners'
 * and the backends' client side.
 *
 * Both are made by one function (tls_ctx_new: protocol floor, no
 * compression nor renegotiation, no passphrase prompt) and load a
 * certificate and its key the same way. Each owns its SSL_CTX; each
 * connection's SSL holds a reference of its own, so a context replaced by a
 * reload lives on until its last connection is gone. It reads the files it
 * is given (at start, on dlockd -t and on a reload, never on the loop
 * otherwise; a client context on the system's CA store may look in
 * SSL_CERT_DIR during a handshake) and must not know about sockets or
 * connections. Encrypted keys are refused rather than prompted for.
 */
#include "tls.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "conf.h"
#include "log.h"
#include "xmalloc.h"

#define TLS_SESSION_ID "dlockd"	/* the session id context (resumption) */

struct tls {
	SSL_CTX *ctx;			/* the context (one reference) */
	uint64_t handshake_ms;		/* tls.handshake_timeout_ms */
	char about[512];		/* the certificate, for the log */
};

struct tls_client {
	SSL_CTX *ctx;			/* the context (one reference) */
	unsigned refs;			/* references to this struct */
};

/* What tls_use_pair() found wrong. */
enum tls_pair {
	TLS_PAIR_OK,			/* both loaded, and they match */
	TLS_PAIR_CERT,			/* the certificate file */
	TLS_PAIR_KEY			/* the key file (or it does not match) */
};

const char *
tls_error_text(unsigned long e)
{
	const char *r = ERR_reason_error_string(e);
	return r != NULL ? r : ERR_error_string(e, NULL);
}

/* OpenSSL's error queue (emptied), oldest first, as "reason; reason" into
 * buf (size > 0; "" for none); returns how long it is. */
static size_t
tls_queue(char *buf, size_t size)
{
	unsigned long e;
	size_t len = 0;

	buf[0] = '\0';
	while ((e = ERR_get_error()) != 0)
		if (len < size)
			len += (size_t)snprintf(buf + len, size - len, "%s%s", len > 0 ? "; " : "",
			    tls_error_text(e));
	return len;
}

/* OpenSSL's reasons for the last failure (its error queue, emptied), into
 * buf. */
static const char *
tls_reasons(char *buf, size_t size)
{
	if (tls_queue(buf, size) == 0)
		snprintf(buf, size, "unknown error");
	return buf;
}

/* Whether OpenSSL's error e says a key does not match its certificate. */
static bool
tls_mismatch(unsigned long e)
{
	return ERR_GET_LIB(e) == ERR_LIB_X509 && ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH;
}

/* Whether the file called path can be read: 0, or the errno that says why
 * not. OpenSSL's own reasons for a file it cannot open say less. */
static int
tls_unreadable(const char *path)
{
	FILE *fp = fopen(path, "re");
	int err = 0;

	if (fp == NULL)
		err = errno;
	else {
		(void)fgetc(fp);
		err = ferror(fp) ? errno : 0;
		fclose(fp);
	}
	return err;
}

/* Whether the file called path can be read: 0, or -1 after adding an error
 * about setting (what names the file's kind) to c. */
static int
tls_readable(struct conf *c, const char *setting, const char *what, const char *path)
{
	int err = tls_unreadable(path);

	if (err == 0)
		return 0;
	return conf_setting_error(c, setting, "cannot read %s file '%s': %s", what, path,
	    strerror(err));
}

/* The passphrase callback: none, so that an encrypted key fails to load
 * instead of asking on the terminal. */
static int
tls_no_passphrase(char *buf, int size, int rwflag, void *arg)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)arg;
	return 0;
}

/* A new context of method with what every context of the daemon has: TLS
 * 1.2 at least (min_version), no compression, no renegotiation, no
 * passphrase prompt, no buffers kept by an idle connection. The caller owns
 * it (SSL_CTX_free). Aborts when out of memory. */
static SSL_CTX *
tls_ctx_new(const SSL_METHOD *method, int min_version)
{
	SSL_CTX *ctx = SSL_CTX_new(method);
	char why[512];

	if (ctx == NULL)
		log_fatal("cannot make a TLS context: %s", tls_reasons(why, sizeof(why)));
	SSL_CTX_set_default_passwd_cb(ctx, tls_no_passphrase);
	(void)SSL_CTX_set_min_proto_version(ctx, min_version);
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	return ctx;
}

/* Load the certificate chain cert_file and its key key_file (PEM) into ctx
 * and check that they match: TLS_PAIR_OK, or which file is wrong with the
 * reason (naming the file) in why[size]. */
static enum tls_pair
tls_use_pair(SSL_CTX *ctx, const char *cert_file, const char *key_file, char *why,
    size_t size)
{
	char reasons[512];

	ERR_clear_error();
	if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
		snprintf(why, size, "cannot load certificate '%s': %s", cert_file,
		    tls_reasons(reasons, sizeof(reasons)));
		return TLS_PAIR_CERT;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1 &&
	    !tls_mismatch(ERR_peek_last_error())) {
		snprintf(why, size, "cannot load key '%s': %s", key_file,
		    tls_reasons(reasons, sizeof(reasons)));
		return TLS_PAIR_KEY;
	}
	if (tls_mismatch(ERR_peek_last_error()) || SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(why, size, "key '%s' does not match certificate '%s': %s", key_file,
		    cert_file, tls_reasons(reasons, sizeof(reasons)));
		return TLS_PAIR_KEY;
	}
	return TLS_PAIR_OK;
}

/* Write the certificate's subject and expiry into t->about. */
static void
tls_about(struct tls *t, const char *cert_file)
{
	X509 *x = SSL_CTX_get0_certificate(t->ctx);
	char subject[256] = "?", until[64] = "?";
	BIO *b = BIO_new(BIO_s_mem());

	if (x != NULL)
		X509_NAME_oneline(X509_get_subject_name(x), subject, sizeof(subject));
	if (x != NULL && b != NULL && ASN1_TIME_print(b, X509_get0_notAfter(x)) == 1) {
		int n = BIO_read(b, until, (int)sizeof(until) - 1);
		until[n > 0 ? n : 0] = '\0';
	}
	BIO_free(b);
	snprintf(t->about, sizeof(t->about), "certificate %s (%s, valid until %s)", cert_file,
	    subject, until);
}

struct tls *
tls_create(struct conf *c)
{
	struct tls *t;
	SSL_CTX *ctx;
	char why[512];
	size_t before = c->nerrors;

	ERR_clear_error();
	if (c->tls_cert_file == NULL || c->tls_key_file == NULL) {
		(void)conf_setting_error(c, c->tls_cert_file == NULL ? "tls.cert_file" :
		    "tls.key_file", "'tls.cert_file' and 'tls.key_file' must be set to serve TLS");
		return NULL;
	}
	(void)tls_readable(c, "tls.cert_file", "certificate", c->tls_cert_file);
	(void)tls_readable(c, "tls.key_file", "key", c->tls_key_file);
	if (c->tls_ca_file != NULL)
		(void)tls_readable(c, "tls.ca_file", "CA certificate", c->tls_ca_file);
	if (c->nerrors > before)
		return NULL;
	ctx = tls_ctx_new(TLS_server_method(), strcmp(c->tls_min_version, "TLSv1.3") == 0 ?
	    TLS1_3_VERSION : TLS1_2_VERSION);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
	/* a client that closes without close_notify just ends its stream (its
	 * requests are framed: nothing it sent can be cut unseen) */
	SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
	(void)SSL_CTX_set_session_id_context(ctx, (const unsigned char *)TLS_SESSION_ID,
	    sizeof(TLS_SESSION_ID) - 1);
	switch (tls_use_pair(ctx, c->tls_cert_file, c->tls_key_file, why, sizeof(why))) {
	case TLS_PAIR_OK:
		break;
	case TLS_PAIR_CERT:
		(void)conf_setting_error(c, "tls.cert_file", "%s", why);
		break;
	case TLS_PAIR_KEY:
		(void)conf_setting_error(c, "tls.key_file", "%s", why);
		break;
	}
	if (c->tls_ca_file != NULL) {
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(c->tls_ca_file);

		if (names == NULL || SSL_CTX_load_verify_locations(ctx, c->tls_ca_file, NULL) != 1)
			(void)conf_setting_error(c, "tls.ca_file", "cannot load CA certificates "
			    "'%s': %s", c->tls_ca_file, tls_reasons(why, sizeof(why)));
		else {
			SSL_CTX_set_client_CA_list(ctx, names);
			names = NULL;
			SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
			    NULL);
		}
		if (names != NULL)
			sk_X509_NAME_pop_free(names, X509_NAME_free);
	}
	ERR_clear_error();
	if (c->nerrors > before) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	t = xcalloc(1, sizeof(*t));
	t->ctx = ctx;
	t->handshake_ms = (uint64_t)c->tls_handshake_timeout_ms;
	tls_about(t, c->tls_cert_file);
	return t;
}

void
tls_destroy(struct tls *t)
{
	if (t == NULL)
		return;
	SSL_CTX_free(t->ctx);
	free(t);
}

struct ssl_st *
tls_new_ssl(const struct tls *t)
{
	SSL *ssl = SSL_new(t->ctx);
	if (ssl == NULL)
		log_fatal("cannot make a TLS connection: out of memory");
	return ssl;
}

uint64_t
tls_handshake_ms(const struct tls *t)
{
	return t->handshake_ms;
}

const char *
tls_describe(const struct tls *t)
{
	return t->about;
}

/* ---- the client side ------------------------------------------------------ */

/* The verify callback of an SSL that has no name to check the server's
 * certificate against: it fails whatever the certificate (as a hostname
 * mismatch, unless verification failed already). */
static int
tls_client_refuse(int ok, X509_STORE_CTX *x)
{
	if (ok)
		X509_STORE_CTX_set_error(x, X509_V_ERR_HOSTNAME_MISMATCH);
	return 0;
}

struct tls_client *
tls_client_create(const char *ca_file, const char *cert_file, const char *key_file,
    char *why, size_t whylen)
{
	const struct {
		const char *what;	/* the file's kind, for the reason */
		const char *path;	/* the file, NULL if not given */
	} files[] = { { "CA certificate", ca_file }, { "certificate", cert_file },
	    { "key", key_file } };
	struct tls_client *tc;
	SSL_CTX *ctx;
	char reasons[512];
	bool ok = true;

	if ((cert_file == NULL) != (key_file == NULL)) {
		snprintf(why, whylen, "a client certificate needs a certificate file and a key "
		    "file: only the %s '%s' is given", cert_file != NULL ? "certificate" : "key",
		    cert_file != NULL ? cert_file : key_file);
		return NULL;
	}
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		int err = files[i].path != NULL ? tls_unreadable(files[i].path) : 0;

		if (err != 0) {
			snprintf(why, whylen, "cannot read %s file '%s': %s", files[i].what,
			    files[i].path, strerror(err));
			return NULL;
		}
	}
	ERR_clear_error();
	ctx = tls_ctx_new(TLS_client_method(), TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (ca_file != NULL) {
		if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
			snprintf(why, whylen, "cannot load CA certificates '%s': %s", ca_file,
			    tls_reasons(reasons, sizeof(reasons)));
			ok = false;
		}
	} else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
		snprintf(why, whylen, "cannot load the system's CA certificates: %s",
		    tls_reasons(reasons, sizeof(reasons)));
		ok = false;
	}
	if (ok && cert_file != NULL &&
	    tls_use_pair(ctx, cert_file, key_file, why, whylen) != TLS_PAIR_OK)
		ok = false;
	ERR_clear_error();
	if (!ok) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	tc = xcalloc(1, sizeof(*tc));
	tc->ctx = ctx;
	tc->refs = 1;
	return tc;
}

void
tls_client_ref(struct tls_client *tc)
{
	assert(tc->refs > 0);
	tc->refs++;
}

void
tls_client_unref(struct tls_client *tc)
{
	if (tc == NULL)
		return;
	assert(tc->refs > 0);
	if (--tc->refs > 0)
		return;
	SSL_CTX_free(tc->ctx);
	free(tc);
}

struct ssl_st *
tls_client_new_ssl(struct tls_client *tc, const char *name)
{
	SSL *ssl = SSL_new(tc->ctx);
	X509_VERIFY_PARAM *param;
	unsigned char addr[16];
	bool named;

	if (ssl == NULL)
		log_fatal("cannot make a TLS connection: out of memory");
	param = SSL_get0_param(ssl);
	if (name == NULL || name[0] == '\0')
		named = false;
	else if (inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1)
		named = X509_VERIFY_PARAM_set1_ip_asc(param, name) == 1;
	else {
		X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		named = X509_VERIFY_PARAM_set1_host(param, name, 0) == 1 &&
		    SSL_set_tlsext_host_name(ssl, name) == 1;
	}
	if (!named) {
		/* nothing to check the certificate against (or a name OpenSSL
		 * refused, such as one too long for SNI): no server passes */
		ERR_clear_error();
		SSL_set_verify(ssl, SSL_VERIFY_PEER, tls_client_refuse);
	}
	return ssl;
}

const char *
tls_client_failure(struct ssl_st *ssl, char *buf, size_t len)
{
	long v = SSL_get_verify_result(ssl);

	if (v != X509_V_OK) {
		ERR_clear_error();
		snprintf(buf, len, "certificate not verified: %s", X509_verify_cert_error_string(v));
	} else if (tls_queue(buf, len) == 0)
		snprintf(buf, len, "connection closed during the TLS handshake");
	return buf;
}

const char *
tls_bev_failure(struct bufferevent *bev, char *buf, size_t size)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	unsigned long e;
	size_t len = 0;
	long v = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;

	buf[0] = '\0';
	if (v != X509_V_OK)
		len = (size_t)snprintf(buf, size, "certificate not verified: %s",
		    X509_verify_cert_error_string(v));
	while ((e = bufferevent_get_openssl_error(bev)) != 0)
		if (v == X509_V_OK && len < size && ERR_GET_LIB(e) != 0)
			/* lib 0: libevent's copy of SSL_get_error() */
			len += (size_t)snprintf(buf + len, size - len, "%s%s", len > 0 ? "; " : "",
			    tls_error_text(e));
	ERR_clear_error();
	return len > 0 ? buf : NULL;
}
