/*
 * check_tls — unit tests of the TLS client context (daemon/tls.c:
 * tls_client_create, tls_client_new_ssl, tls_client_failure, the reference
 * count), by real handshakes in this process over a socket pair, with an
 * OpenSSL server context of the test's own.
 *
 * The certificates are made once per run (EC P-256 keys, OpenSSL's X509
 * builder) into a temporary directory: a CA, a server certificate for DNS
 * localhost and IP 127.0.0.1, a client certificate, a certificate with
 * wildcard names, all signed by the CA, and an unrelated second CA.
 *
 * Cases: the server's DNS name and IP address verified (SNI sent for a name
 * only), a server of another CA refused, a wrong name or address refused,
 * no partial wildcards, no name at all refused, client certificates, the
 * system store through SSL_CERT_FILE, files that cannot be loaded, SSLs
 * that outlive their context's last reference, and the reasons given when
 * no certificate is at fault (a peer that hangs up or does not speak TLS).
 */
#include <check.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "suite.h"
#include "tls.h"

#define ROUNDS 200		/* steps of a handshake in memory, at most */

/* The certificates, made once by certs_make(). */
enum cert_id {
	CERT_CA,		/* the CA that signs the others */
	CERT_OTHER_CA,		/* an unrelated CA */
	CERT_SERVER,		/* CN localhost, DNS:localhost, IP:127.0.0.1 */
	CERT_CLIENT,		/* CN test client, no names */
	CERT_WILD,		/* DNS:*.wild.test, DNS:f*.dlock.test */
	NCERTS
};

/* What certs_make() makes (the names of the files it writes). */
static const struct {
	const char *name;	/* file name.crt, key name.key */
	const char *cn;		/* its common name */
	const char *san;	/* its subjectAltName, NULL for none */
	bool ca;		/* a CA (self-signed), else signed by CERT_CA */
} cert_specs[NCERTS] = {
	[CERT_CA] = { "ca", "dlockd test CA", NULL, true },
	[CERT_OTHER_CA] = { "other-ca", "dlockd other CA", NULL, true },
	[CERT_SERVER] = { "server", "localhost", "DNS:localhost,IP:127.0.0.1", false },
	[CERT_CLIENT] = { "client", "test client", NULL, false },
	[CERT_WILD] = { "wild", "wild", "DNS:*.wild.test,DNS:f*.dlock.test", false },
};

/* The test certificates and their files. */
static struct {
	char dir[256];			/* the temporary directory */
	char crt[NCERTS][300];		/* each certificate's file */
	char key[NCERTS][300];		/* each key's file */
	X509 *x[NCERTS];		/* each certificate */
	EVP_PKEY *k[NCERTS];		/* each key */
} certs;

/* What handshake() saw. */
struct outcome {
	bool client_ok;		/* handshake done, and a byte from the server read */
	bool server_ok;		/* the server's SSL_accept succeeded */
	char why[512];		/* tls_client_failure() when the client failed */
	char sni[256];		/* the name the server was sent, "" for none */
	bool peer_cert;		/* the server got a client certificate */
};

/* Stop the run (in the fixture, which is outside every test) unless cond. */
#define FIX(cond) do { \
	if (!(cond)) \
		ck_abort_msg("fixture: %s failed: %s", #cond, \
		    ERR_error_string(ERR_get_error(), NULL)); \
} while (0)

/* Add the extension nid = value to x (issued by issuer). */
static void
cert_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX v3;
	X509_EXTENSION *ext;

	X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
	FIX((ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value)) != NULL);
	FIX(X509_add_ext(x, ext, -1) == 1);
	X509_EXTENSION_free(ext);
}

/* Make certificate i of cert_specs with a new key, valid from an hour ago
 * for a day, and write both into the directory. */
static void
cert_make(enum cert_id i)
{
	X509 *x, *issuer;
	EVP_PKEY *key, *issuer_key;
	X509_NAME *name;
	FILE *fp;

	FIX((key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256")) != NULL);
	FIX((x = X509_new()) != NULL);
	issuer = cert_specs[i].ca ? x : certs.x[CERT_CA];
	issuer_key = cert_specs[i].ca ? key : certs.k[CERT_CA];
	FIX(X509_set_version(x, 2) == 1);
	FIX(ASN1_INTEGER_set(X509_get_serialNumber(x), (long)i + 1) == 1);
	FIX(X509_gmtime_adj(X509_getm_notBefore(x), -3600) != NULL);
	FIX(X509_gmtime_adj(X509_getm_notAfter(x), 86400) != NULL);
	FIX(X509_set_pubkey(x, key) == 1);
	name = X509_get_subject_name(x);
	FIX(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
	    (const unsigned char *)cert_specs[i].cn, -1, -1, 0) == 1);
	FIX(X509_set_issuer_name(x, X509_get_subject_name(issuer)) == 1);
	if (cert_specs[i].ca) {
		cert_ext(x, issuer, NID_basic_constraints, "critical,CA:TRUE");
		cert_ext(x, issuer, NID_key_usage, "critical,keyCertSign,cRLSign");
	} else
		cert_ext(x, issuer, NID_basic_constraints, "CA:FALSE");
	if (cert_specs[i].san != NULL)
		cert_ext(x, issuer, NID_subject_alt_name, cert_specs[i].san);
	FIX(X509_sign(x, issuer_key, EVP_sha256()) > 0);
	certs.x[i] = x;
	certs.k[i] = key;

	snprintf(certs.crt[i], sizeof(certs.crt[i]), "%s/%s.crt", certs.dir, cert_specs[i].name);
	snprintf(certs.key[i], sizeof(certs.key[i]), "%s/%s.key", certs.dir, cert_specs[i].name);
	FIX((fp = fopen(certs.crt[i], "w")) != NULL);
	FIX(PEM_write_X509(fp, x) == 1);
	FIX(fclose(fp) == 0);
	FIX((fp = fopen(certs.key[i], "w")) != NULL);
	FIX(PEM_write_PrivateKey(fp, key, NULL, NULL, 0, NULL, NULL) == 1);
	FIX(fclose(fp) == 0);
}

/* The unchecked fixture: every certificate, once per run. */
static void
certs_make(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(certs.dir, sizeof(certs.dir), "%s/check_tls.XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	FIX(mkdtemp(certs.dir) != NULL);
	for (int i = 0; i < NCERTS; i++)
		cert_make((enum cert_id)i);
}

/* Its teardown: the files, the directory, the certificates and keys. */
static void
certs_free(void)
{
	for (int i = 0; i < NCERTS; i++) {
		unlink(certs.crt[i]);
		unlink(certs.key[i]);
		X509_free(certs.x[i]);
		EVP_PKEY_free(certs.k[i]);
	}
	rmdir(certs.dir);
	memset(&certs, 0, sizeof(certs));
}

/* A server context of certificate id; with client_ca, it requires a client
 * certificate signed by that CA. The caller owns it (SSL_CTX_free). */
static SSL_CTX *
server_ctx(enum cert_id id, X509 *client_ca)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

	ck_assert_ptr_nonnull(ctx);
	ck_assert_int_eq(SSL_CTX_use_certificate(ctx, certs.x[id]), 1);
	ck_assert_int_eq(SSL_CTX_use_PrivateKey(ctx, certs.k[id]), 1);
	if (client_ca != NULL) {
		ck_assert_int_eq(X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), client_ca), 1);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	}
	return ctx;
}

/* One step of side ssl's handshake (is_server: SSL_accept, else
 * SSL_connect): 1 done, 0 wants more, -1 failed. */
static int
step(SSL *ssl, bool is_server)
{
	int r = is_server ? SSL_accept(ssl) : SSL_connect(ssl);

	if (r == 1)
		return 1;
	switch (SSL_get_error(ssl, r)) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return 0;
	default:
		return -1;
	}
}

/* Connect client (which this frees) to a new server of sctx over a socket
 * pair, both ends non-blocking, pumped in turn; then the server sends one
 * byte, which the client must read (with TLS 1.3 a server refuses a client
 * certificate after the client's handshake is done). What happened goes
 * into o. The client's failure is asked of tls_client_failure() as soon as
 * it happens, and must leave OpenSSL's error queue empty. */
static void
handshake(SSL *client, SSL_CTX *sctx, struct outcome *o)
{
	int sv[2], cstate = 0, sstate = 0, round;
	SSL *server;
	const char *sni;
	char c;

	memset(o, 0, sizeof(*o));
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	ck_assert_ptr_nonnull(server = SSL_new(sctx));
	ck_assert_int_eq(SSL_set_fd(client, sv[0]), 1);
	ck_assert_int_eq(SSL_set_fd(server, sv[1]), 1);
	ERR_clear_error();
	for (round = 0; round < ROUNDS && (cstate == 0 || sstate == 0); round++) {
		if (cstate == 0 && (cstate = step(client, false)) < 0) {
			tls_client_failure(client, o->why, sizeof(o->why));
			ck_assert_uint_eq(ERR_peek_error(), 0);
		}
		if (sstate == 0 && (sstate = step(server, true)) < 0) {
			/* its alert is sent; then the client sees the end */
			ERR_clear_error();
			ck_assert_int_eq(shutdown(sv[1], SHUT_RDWR), 0);
		}
	}
	ck_assert_msg(round < ROUNDS, "handshake stuck: client %d, server %d", cstate, sstate);
	o->server_ok = sstate == 1;
	if (o->server_ok) {
		sni = SSL_get_servername(server, TLSEXT_NAMETYPE_host_name);
		snprintf(o->sni, sizeof(o->sni), "%s", sni != NULL ? sni : "");
		o->peer_cert = SSL_get0_peer_certificate(server) != NULL;
		ck_assert_int_eq(SSL_write(server, "x", 1), 1);
	}
	for (round = 0; cstate == 1 && round < ROUNDS; round++) {
		int r = SSL_read(client, &c, 1);

		if (r == 1) {
			ck_assert_int_eq(c, 'x');
			o->client_ok = true;
			break;
		}
		if (SSL_get_error(client, r) != SSL_ERROR_WANT_READ) {
			tls_client_failure(client, o->why, sizeof(o->why));
			ck_assert_uint_eq(ERR_peek_error(), 0);
			break;
		}
	}
	ck_assert_int_lt(round, ROUNDS);
	ERR_clear_error();
	SSL_free(client);
	SSL_free(server);
	close(sv[0]);
	close(sv[1]);
}

/* A client context of CA file ca (NULL: the system's store) and client
 * certificate cert (its key too; NULL: none); fails the test if it cannot
 * be made. The caller owns the reference. */
static struct tls_client *
client_of(const char *ca, const char *cert, const char *key)
{
	char why[512] = "";
	struct tls_client *tc = tls_client_create(ca, cert, key, why, sizeof(why));

	ck_assert_msg(tc != NULL, "tls_client_create: %s", why);
	return tc;
}

/* Handshake with a client of tc asking for name against a server of
 * certificate id (requiring a client certificate of the CA when
 * client_ca); what happened into o. */
static void
try_name(struct tls_client *tc, const char *name, enum cert_id id, bool client_ca,
    struct outcome *o)
{
	SSL_CTX *sctx = server_ctx(id, client_ca ? certs.x[CERT_CA] : NULL);

	handshake(tls_client_new_ssl(tc, name), sctx, o);
	SSL_CTX_free(sctx);
}

/* A handshake that the client refuses because of the server's certificate:
 * the reason must be want. */
static void
assert_refused(struct tls_client *tc, const char *name, enum cert_id id, const char *want)
{
	struct outcome o;

	try_name(tc, name, id, false, &o);
	ck_assert_msg(!o.client_ok, "%s: the client accepted the server", name);
	ck_assert_msg(!o.server_ok, "%s: the server finished its handshake", name);
	ck_assert_str_eq(o.why, want);
}

START_TEST(dns_name_verified_and_sent_as_sni)
{
	struct tls_client *tc = client_of(certs.crt[CERT_CA], NULL, NULL);
	SSL *ssl = tls_client_new_ssl(tc, "localhost");
	struct outcome o;

	ck_assert_int_eq(SSL_is_server(ssl), 0);
	ck_assert_int_eq(SSL_get_min_proto_version(ssl), TLS1_2_VERSION);
	ck_assert_int_ne(SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER, 0);
	SSL_CTX *sctx = server_ctx(CERT_SERVER, NULL);
	handshake(ssl, sctx, &o);
	SSL_CTX_free(sctx);
	ck_assert_msg(o.client_ok, "refused: %s", o.why);
	ck_assert(o.server_ok);
	ck_assert_str_eq(o.sni, "localhost");
	ck_assert(!o.peer_cert);
	tls_client_unref(tc);
}
END_TEST

START_TEST(ip_address_verified_without_sni)
{
	struct tls_client *tc = client_of(certs.crt[CERT_CA], NULL, NULL);
	struct outcome o;

	try_name(tc, "127.0.0.1", CERT_SERVER, false, &o);
	ck_assert_msg(o.client_ok, "refused: %s", o.why);
	ck_assert_str_eq(o.sni, "");
	/* an address is checked against the IP names, not the DNS ones */
	assert_refused(tc, "127.0.0.2", CERT_SERVER, "certificate not verified: IP address mismatch");
	assert_refused(tc, "::1", CERT_SERVER, "certificate not verified: IP address mismatch");
	tls_client_unref(tc);
}
END_TEST

START_TEST(server_of_another_ca_refused)
{
	struct tls_client *tc = client_of(certs.crt[CERT_OTHER_CA], NULL, NULL);

	assert_refused(tc, "localhost", CERT_SERVER,
	    "certificate not verified: unable to get local issuer certificate");
	tls_client_unref(tc);
}
END_TEST

START_TEST(wrong_name_refused)
{
	struct tls_client *tc = client_of(certs.crt[CERT_CA], NULL, NULL);

	assert_refused(tc, "other.example", CERT_SERVER,
	    "certificate not verified: hostname mismatch");
	/* the common name of a certificate with names is not one of them */
	assert_refused(tc, "wild", CERT_WILD, "certificate not verified: hostname mismatch");
	tls_client_unref(tc);
}
END_TEST

START_TEST(no_partial_wildcards)
{
	struct tls_client *tc = client_of(certs.crt[CERT_CA], NULL, NULL);
	struct outcome o;

	try_name(tc, "a.wild.test", CERT_WILD, false, &o);
	ck_assert_msg(o.client_ok, "*.wild.test refused: %s", o.why);
	assert_refused(tc, "foo.dlock.test", CERT_WILD,
	    "certificate not verified: hostname mismatch");
	tls_client_unref(tc);
}
END_TEST

START_TEST(no_name_matches_nothing)
{
	struct tls_client *tc = client_of(certs.crt[CERT_CA], NULL, NULL);

	assert_refused(tc, "", CERT_SERVER, "certificate not verified: hostname mismatch");
	assert_refused(tc, NULL, CERT_SERVER, "certificate not verified: hostname mismatch");
	tls_client_unref(tc);
}
END_TEST

START_TEST(client_certificate)
{
	struct tls_client *with = client_of(certs.crt[CERT_CA], certs.crt[CERT_CLIENT],
	    certs.key[CERT_CLIENT]);
	struct tls_client *without = client_of(certs.crt[CERT_CA], NULL, NULL);
	struct outcome o;

	try_name(with, "localhost", CERT_SERVER, true, &o);
	ck_assert_msg(o.client_ok, "refused: %s", o.why);
	ck_assert(o.server_ok);
	ck_assert(o.peer_cert);

	try_name(without, "localhost", CERT_SERVER, true, &o);
	ck_assert(!o.server_ok);
	ck_assert(!o.client_ok);
	ck_assert_str_ne(o.why, "");
	ck_assert_msg(strstr(o.why, "certificate not verified") == NULL, "%s", o.why);
	/* the server's alert, as OpenSSL names it */
	ck_assert_msg(strstr(o.why, "alert") != NULL, "%s", o.why);
	tls_client_unref(with);
	tls_client_unref(without);
}
END_TEST

/* Set the variable name to value (NULL: unset it). */
static void
set_env(const char *name, const char *value)
{
	if (value != NULL)
		ck_assert_int_eq(setenv(name, value, 1), 0);
	else
		ck_assert_int_eq(unsetenv(name), 0);
}

START_TEST(system_store_from_ssl_cert_file)
{
	char *old_file = getenv("SSL_CERT_FILE"), *old_dir = getenv("SSL_CERT_DIR");
	struct tls_client *tc, *other;

	old_file = old_file != NULL ? strdup(old_file) : NULL;
	old_dir = old_dir != NULL ? strdup(old_dir) : NULL;
	/* no directory of certificates but the (empty) scratch one */
	set_env("SSL_CERT_DIR", certs.dir);
	set_env("SSL_CERT_FILE", certs.crt[CERT_CA]);
	tc = client_of(NULL, NULL, NULL);
	set_env("SSL_CERT_FILE", certs.crt[CERT_OTHER_CA]);
	other = client_of(NULL, NULL, NULL);
	set_env("SSL_CERT_FILE", old_file);
	set_env("SSL_CERT_DIR", old_dir);
	free(old_file);
	free(old_dir);

	struct outcome o;
	try_name(tc, "localhost", CERT_SERVER, false, &o);
	ck_assert_msg(o.client_ok, "refused: %s", o.why);
	assert_refused(other, "localhost", CERT_SERVER,
	    "certificate not verified: unable to get local issuer certificate");
	tls_client_unref(tc);
	tls_client_unref(other);
}
END_TEST

/* tls_client_create(ca, cert, key) fails, and its reason contains want
 * and, if given, want2. */
static void
assert_create_fails(const char *ca, const char *cert, const char *key, const char *want,
    const char *want2)
{
	char why[1024] = "";
	struct tls_client *tc = tls_client_create(ca, cert, key, why, sizeof(why));

	if (tc != NULL)
		tls_client_unref(tc);
	ck_assert_msg(tc == NULL, "made a context of %s, %s, %s", ca, cert, key);
	ck_assert_msg(strstr(why, want) != NULL, "'%s' not in '%s'", want, why);
	if (want2 != NULL)
		ck_assert_msg(strstr(why, want2) != NULL, "'%s' not in '%s'", want2, why);
	ck_assert_msg(strchr(why, '\n') == NULL, "not one line: '%s'", why);
	ck_assert_uint_eq(ERR_peek_error(), 0);
}

START_TEST(files_that_cannot_be_loaded)
{
	char missing[400];
	const char *ca = certs.crt[CERT_CA];
	const char *crt = certs.crt[CERT_CLIENT], *key = certs.key[CERT_CLIENT];

	snprintf(missing, sizeof(missing), "%s/missing.pem", certs.dir);
	assert_create_fails(missing, NULL, NULL, "cannot read CA certificate file", missing);
	assert_create_fails(ca, missing, key, "cannot read certificate file", missing);
	assert_create_fails(ca, crt, missing, "cannot read key file", missing);
	assert_create_fails(NULL, crt, missing, "No such file or directory", missing);
	/* files of the wrong kind */
	assert_create_fails(key, NULL, NULL, "cannot load CA certificates", key);
	assert_create_fails(ca, key, key, "cannot load certificate", key);
	assert_create_fails(ca, crt, crt, "cannot load key", crt);
	/* a key that is not the certificate's */
	assert_create_fails(ca, crt, certs.key[CERT_SERVER], "does not match certificate", crt);
	assert_create_fails(ca, crt, certs.key[CERT_SERVER], certs.key[CERT_SERVER], NULL);
	/* half a client certificate */
	assert_create_fails(ca, crt, NULL, "needs a certificate file and a key file", crt);
	assert_create_fails(ca, NULL, key, "needs a certificate file and a key file", key);
}
END_TEST

START_TEST(ssl_outlives_the_last_reference)
{
	struct tls_client *tc = client_of(certs.crt[CERT_CA], NULL, NULL);
	SSL *first, *second;
	struct outcome o;

	tls_client_ref(tc);
	first = tls_client_new_ssl(tc, "localhost");
	tls_client_unref(tc);
	second = tls_client_new_ssl(tc, "127.0.0.1");
	tls_client_unref(tc);		/* the last one */
	tls_client_unref(NULL);

	SSL_CTX *sctx = server_ctx(CERT_SERVER, NULL);
	handshake(first, sctx, &o);
	ck_assert_msg(o.client_ok, "refused: %s", o.why);
	handshake(second, sctx, &o);
	ck_assert_msg(o.client_ok, "refused: %s", o.why);
	SSL_CTX_free(sctx);
}
END_TEST

START_TEST(failure_reasons)
{
	struct tls_client *tc = client_of(certs.crt[CERT_CA], NULL, NULL);
	SSL *ssl = tls_client_new_ssl(tc, "localhost");
	char buf[256];
	int sv[2];

	/* nothing went wrong that OpenSSL knows of */
	ERR_clear_error();
	ck_assert_str_eq(tls_client_failure(ssl, buf, sizeof(buf)),
	    "connection closed during the TLS handshake");
	/* the server reads the ClientHello and hangs up: OpenSSL's reason, the
	 * queue emptied */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	ck_assert_int_eq(SSL_set_fd(ssl, sv[0]), 1);
	ck_assert_int_eq(step(ssl, false), 0);
	ck_assert_int_gt(read(sv[1], buf, sizeof(buf)), 0);
	close(sv[1]);
	ck_assert_int_eq(step(ssl, false), -1);
	ck_assert_ptr_eq(tls_client_failure(ssl, buf, sizeof(buf)), buf);
	ck_assert_str_ne(buf, "");
	ck_assert_msg(strstr(buf, "certificate") == NULL, "%s", buf);
	ck_assert_uint_eq(ERR_peek_error(), 0);
	/* a short buffer is cut, not overrun */
	ck_assert_uint_eq(strlen(tls_client_failure(ssl, buf, 8)), 7);
	SSL_free(ssl);
	close(sv[0]);
	/* a server that does not speak TLS: OpenSSL's reason, the queue emptied */
	ssl = tls_client_new_ssl(tc, "localhost");
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	ck_assert_int_eq(SSL_set_fd(ssl, sv[0]), 1);
	ck_assert_int_eq(step(ssl, false), 0);
	ck_assert_int_eq(write(sv[1], "-ERR unknown command\r\n", 22), 22);
	ck_assert_int_eq(step(ssl, false), -1);
	tls_client_failure(ssl, buf, sizeof(buf));
	ck_assert_str_ne(buf, "");
	ck_assert_str_ne(buf, "connection closed during the TLS handshake");
	ck_assert_msg(strstr(buf, "certificate") == NULL, "%s", buf);
	ck_assert_uint_eq(ERR_peek_error(), 0);
	SSL_free(ssl);
	close(sv[0]);
	close(sv[1]);
	tls_client_unref(tc);
}
END_TEST

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);	/* as in the daemon: a write to a closed peer fails */

	Suite *s = suite_create("tls");
	TCase *tc;

	tc = suite_case(s, "client", NULL, NULL, 30,
	    SUITE_TESTS(dns_name_verified_and_sent_as_sni, ip_address_verified_without_sni,
	    server_of_another_ca_refused, wrong_name_refused, no_partial_wildcards,
	    no_name_matches_nothing, client_certificate, system_store_from_ssl_cert_file,
	    files_that_cannot_be_loaded, ssl_outlives_the_last_reference, failure_reasons));
	tcase_add_unchecked_fixture(tc, certs_make, certs_free);
	return suite_run(s);
}
