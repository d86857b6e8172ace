// PublicListing: the catalog listing as clients see it (the SIFT/1 `list` reply, GET /v1/models):
// file and model paths are reduced to their base names, and absolute paths inside error
// messages to theirs, so a client learns what is served, not where the operator keeps it.
// (The daemon's own log lines keep the full paths.)
//
// THREADING: pure function.
// ERRORS:    none; fields it does not know are passed through.
#ifndef SIFT_DAEMON_PUBLIC_LISTING_H_
#define SIFT_DAEMON_PUBLIC_LISTING_H_

#include <nlohmann/json.hpp>
#include <string>

namespace sift::daemon {

// "/srv/sift/plugins/x.so" -> "x.so" (a path's last component; "" stays "").
std::string BaseName(const std::string& path);
// Every absolute path in `text` (a '/' that starts a word, up to whitespace, a quote, ':' or
// ',') replaced by its base name.
std::string StripAbsolutePaths(const std::string& text);
// The listing with pipelines[].file, plugins[].file and model.path as base names and the
// absolute paths in pipelines[].error, pipelines[].unavailable and plugins[].error stripped.
nlohmann::json PublicListing(nlohmann::json listing);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_PUBLIC_LISTING_H_
