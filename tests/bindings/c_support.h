/* What the C binding tests share: a check that stops the program with the
 * library's message, and the trust every test target uses (one key, for
 * peers and code). */
#ifndef THREECHAINS_TESTS_C_SUPPORT_H
#define THREECHAINS_TESTS_C_SUPPORT_H

#include <threechains/threechains.h>

#include <stdio.h>
#include <stdlib.h>

/* A macro, so the message names the failing call and its line. */
#define CHECK(call)                                                                        \
  do {                                                                                     \
    threechains_status status_ = (call);                                                   \
    if (status_ != THREECHAINS_OK) {                                                       \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,                  \
              threechains_status_string(status_), threechains_last_error());               \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

/* A trust that accepts the key in `public_key_file` as peer and code signer. */
static inline threechains_trust* trust_of_key_file(const char* public_key_file) {
  threechains_public_key* key = NULL;
  threechains_trust* trust = NULL;
  CHECK(threechains_public_key_load(public_key_file, &key));
  CHECK(threechains_trust_create(&trust));
  CHECK(threechains_trust_allow_peer(trust, key));
  CHECK(threechains_trust_allow_native_code_signer(trust, key));
  threechains_public_key_destroy(key); /* the trust keeps a copy */
  return trust;
}

#endif
