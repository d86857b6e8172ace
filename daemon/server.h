// RunDaemon: siftd's wiring. Loads the model once, builds the catalog, starts the front end
// (ZeroMQ client port, scheduler, workers), the optional OpenAI-compatible HTTP port on the
// same front end (--openai, openai_server.h) and the operations side (Boost.Asio: signals,
// rescan timer, HTTP /health and /metrics), then serves until SIGTERM/SIGINT drains it.
//
// Signals: SIGTERM or SIGINT starts a graceful drain (a second one cancels what is left);
// SIGHUP rescans the plugin and pipeline folders (also done every --rescan-ms).
//
// THREADING: blocks the calling thread; owns every thread it starts.
// ERRORS:    returns the exit code: 0 after a clean drain, 1 when start-up fails (the reason
//            is logged as an "error" line), 2 for bad options.
#ifndef SIFT_DAEMON_SERVER_H_
#define SIFT_DAEMON_SERVER_H_

#include "daemon/options.h"

namespace sift::daemon {

int RunDaemon(const DaemonOptions& options);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_SERVER_H_
