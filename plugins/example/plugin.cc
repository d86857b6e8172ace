// keep_recent.so: the plugin shim. This is all the ABI code a plugin needs: one SIFT_PLUGIN line
// naming the plugin, its version, its kind and its stage class (see keep_recent_stage.h).
#include "sift/plugin.h"
#include "keep_recent_stage.h"

// Tests build a second version of this plugin with -DSIFT_EXAMPLE_VERSION="2.0.0" to exercise
// hot reload; the served build uses the default.
#ifndef SIFT_EXAMPLE_VERSION
#define SIFT_EXAMPLE_VERSION "1.0.0"
#endif

SIFT_PLUGIN("keep_recent", SIFT_EXAMPLE_VERSION, sift::StageKind::kSelect,
            sift::plugins::KeepRecentStage)
