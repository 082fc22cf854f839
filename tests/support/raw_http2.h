#ifndef TESTS_SUPPORT_RAW_HTTP2_H_
#define TESTS_SUPPORT_RAW_HTTP2_H_

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tests {

// A raw HTTP/2 client's first bytes on a connected stream socket `fd`: the client connection
// preface and an empty SETTINGS frame (RFC 9113, 3.4). A server that has accepted the connection
// (gRPC's, for the control API) answers with a SETTINGS frame of its own; a connection still in
// the listen backlog gets nothing. For tests that must see whether the API serves without
// speaking gRPC (before the jail, on a TCP port bound before the sandbox).
absl::Status SendHttp2Preface(int fd);

// Whether the server sent anything on `fd` within `wait`.
bool ServerAnswered(int fd, absl::Duration wait);

// Reads the 9-byte header of the server's first frame and says whether it is SETTINGS (type 4):
// an HTTP/2 server's first frame must be (RFC 9113, 3.4). Call after ServerAnswered().
bool FirstFrameIsSettings(int fd);

}  // namespace tests

#endif  // TESTS_SUPPORT_RAW_HTTP2_H_
