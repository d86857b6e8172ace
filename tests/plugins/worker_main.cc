// sift_test_worker: RunWorker (daemon/worker.h) as a process, for the two-process pipeline
// test; `siftd --worker` does the same with the daemon's full option set.
//   sift_test_worker --worker --bind tcp://127.0.0.1:* --plugins DIR --model PATH [--dtype fp32]
#include <cstring>
#include <iostream>
#include <string>

#include "daemon/worker.h"
#include "sift/model.h"

int main(int argc, char** argv) {
  sift::daemon::WorkerOptions options;
  std::string model_path, dtype = "bf16";
  int first = argc > 1 && std::strcmp(argv[1], "--worker") == 0 ? 2 : 1;
  for (int i = first; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--bind") {
      options.bind = value;
    } else if (flag == "--plugins") {
      options.plugins_dir = value;
    } else if (flag == "--model") {
      model_path = value;
    } else if (flag == "--dtype") {
      dtype = value;
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  try {
    sift::ModelOptions model_options;
    model_options.dtype = sift::ParseDtype(dtype);
    options.model = sift::Model::Load(model_path, model_options);
  } catch (const std::exception& e) {
    std::cerr << "cannot load the model: " << e.what() << "\n";
    return 2;
  }
  return sift::daemon::RunWorker(options);
}
