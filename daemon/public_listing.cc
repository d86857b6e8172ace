#include "daemon/public_listing.h"

namespace sift::daemon {
namespace {

bool EndsPath(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\'' || c == '"' || c == ':' || c == ',' ||
         c == ')' || c == ';';
}

void StripSection(nlohmann::json& listing, const char* section) {
  auto it = listing.find(section);
  if (it == listing.end() || !it->is_array()) return;
  for (nlohmann::json& entry : *it) {
    if (!entry.is_object()) continue;
    if (auto f = entry.find("file"); f != entry.end() && f->is_string()) {
      *f = BaseName(f->get<std::string>());
    }
    for (const char* key : {"error", "unavailable"}) {  // unavailable: pipeline_availability.h
      if (auto e = entry.find(key); e != entry.end() && e->is_string()) {
        *e = StripAbsolutePaths(e->get<std::string>());
      }
    }
  }
}

}  // namespace

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string StripAbsolutePaths(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const bool starts_word = i == 0 || EndsPath(text[i - 1]) || text[i - 1] == '(';
    if (text[i] != '/' || !starts_word) {
      out += text[i++];
      continue;
    }
    size_t end = i;
    while (end < text.size() && !EndsPath(text[end])) ++end;
    out += BaseName(text.substr(i, end - i));
    i = end;
  }
  return out;
}

nlohmann::json PublicListing(nlohmann::json listing) {
  if (!listing.is_object()) return listing;
  StripSection(listing, "pipelines");
  StripSection(listing, "plugins");
  if (auto m = listing.find("model"); m != listing.end() && m->is_object()) {
    if (auto p = m->find("path"); p != m->end() && p->is_string()) {
      *p = BaseName(p->get<std::string>());
    }
  }
  return listing;
}

}  // namespace sift::daemon
