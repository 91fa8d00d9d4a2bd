// A throwaway certificate authority for TLS tests, made with the openssl CLI: ca.pem (the CA), and
// server.pem / server.key (a certificate it signed for 127.0.0.1 and localhost), in `dir`.
#pragma once

#include <cstdlib>
#include <string>

namespace tessera::testing {

// True when the files were written.
inline bool make_test_ca(const std::string& dir) {
  const std::string d = "'" + dir + "'";
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string cmd =
      "set -e; cd " + d + "; openssl req -x509 " + ec +
      " -keyout ca.key -out ca.pem -days 2 -subj '/CN=tessera test CA' 2>/dev/null;"
      " openssl req " +
      ec +
      " -keyout server.key -out server.csr -subj '/CN=127.0.0.1' 2>/dev/null;"
      " printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext.cnf;"
      " openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2"
      " -extfile ext.cnf 2>/dev/null";
  return std::system(("bash -c \"" + cmd + "\"").c_str()) == 0;
}

}  // namespace tessera::testing
