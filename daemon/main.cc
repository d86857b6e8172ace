// siftd: the sift serving daemon. Everything lives in the sift_daemon library (server.h).
#include <cstdio>
#include <string>

#include "daemon/options.h"
#include "daemon/server.h"
#include "sift/model.h"

int main(int argc, char** argv) {
  sift::ConfigureThreadEnvironment(argv);
  sift::daemon::DaemonOptions options;
  std::string message;
  switch (sift::daemon::ParseOptions(argc, argv, &options, &message)) {
    case sift::daemon::ParseResult::kExitOk:
      std::printf("%s\n", message.c_str());
      return 0;
    case sift::daemon::ParseResult::kError:
      std::fprintf(stderr, "siftd: error: %s (see siftd --help)\n", message.c_str());
      return 2;
    case sift::daemon::ParseResult::kRun:
      break;
  }
  return sift::daemon::RunDaemon(options);
}
