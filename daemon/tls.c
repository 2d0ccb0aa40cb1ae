/*
 * tls — the TLS context (an OpenSSL SSL_CTX) of the TLS listeners.
 *
 * It owns the SSL_CTX; each connection's SSL holds a reference of its own,
 * so a context replaced by a reload lives on until its last connection is
 * gone. It reads the files the config names (at start, on dlockd -t and on
 * a reload, never on the loop otherwise) and must not know about sockets or
 * connections. Encrypted keys are refused rather than prompted for.
 */
#include "tls.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "conf.h"
#include "log.h"
#include "xmalloc.h"

#define TLS_SESSION_ID "dlockd"	/* the session id context (resumption) */

struct tls {
	SSL_CTX *ctx;			/* the context (one reference) */
	uint64_t handshake_ms;		/* tls.handshake_timeout_ms */
	char about[512];		/* the certificate, for the log */
};

const char *
tls_error_text(unsigned long e)
{
	const char *r = ERR_reason_error_string(e);
	return r != NULL ? r : ERR_error_string(e, NULL);
}

/* OpenSSL's reasons for the last failure (its error queue, emptied), into
 * buf. */
static const char *
tls_reasons(char *buf, size_t size)
{
	unsigned long e;
	size_t len = 0;

	buf[0] = '\0';
	while ((e = ERR_get_error()) != 0)
		if (len < size)
			len += (size_t)snprintf(buf + len, size - len, "%s%s", len > 0 ? "; " : "",
			    tls_error_text(e));
	if (len == 0)
		snprintf(buf, size, "unknown error");
	return buf;
}

/* Whether OpenSSL's error e says a key does not match its certificate. */
static bool
tls_mismatch(unsigned long e)
{
	return ERR_GET_LIB(e) == ERR_LIB_X509 && ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH;
}

/* Whether the file called path can be read: 0, or -1 after adding an error
 * about setting (what names the file's kind) to c. OpenSSL's own reasons
 * for a file it cannot open say less. */
static int
tls_readable(struct conf *c, const char *setting, const char *what, const char *path)
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
	if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL)
		log_fatal("cannot make a TLS context: %s", tls_reasons(why, sizeof(why)));
	SSL_CTX_set_default_passwd_cb(ctx, tls_no_passphrase);
	(void)SSL_CTX_set_min_proto_version(ctx, strcmp(c->tls_min_version, "TLSv1.3") == 0 ?
	    TLS1_3_VERSION : TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
	/* a client that closes without close_notify just ends its stream (its
	 * requests are framed: nothing it sent can be cut unseen) */
	SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
	/* an idle connection keeps no read or write buffer */
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	(void)SSL_CTX_set_session_id_context(ctx, (const unsigned char *)TLS_SESSION_ID,
	    sizeof(TLS_SESSION_ID) - 1);
	if (SSL_CTX_use_certificate_chain_file(ctx, c->tls_cert_file) != 1)
		(void)conf_setting_error(c, "tls.cert_file", "cannot load certificate '%s': %s",
		    c->tls_cert_file, tls_reasons(why, sizeof(why)));
	else if (SSL_CTX_use_PrivateKey_file(ctx, c->tls_key_file, SSL_FILETYPE_PEM) != 1 &&
	    !tls_mismatch(ERR_peek_last_error()))
		(void)conf_setting_error(c, "tls.key_file", "cannot load key '%s': %s",
		    c->tls_key_file, tls_reasons(why, sizeof(why)));
	else if (tls_mismatch(ERR_peek_last_error()) || SSL_CTX_check_private_key(ctx) != 1)
		(void)conf_setting_error(c, "tls.key_file", "key '%s' does not match certificate "
		    "'%s': %s", c->tls_key_file, c->tls_cert_file, tls_reasons(why, sizeof(why)));
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
