// RunDaemon: siftd's entry point after option parsing. Sets the log level, then runs one mode:
// --make-curve-keys (write a key pair), --preflight (the plugin pre-flight child,
// plugin_preflight.h), --worker (a remote stage host, worker.h) or, by default, the serving
// daemon: Daemon::Start, Serve, Drain (daemon.h).
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
