#include "sift/host.h"

#include "sift/error.h"
#include "sift/op_counter.h"

namespace sift {

at::Tensor ToHost(const at::Tensor& t) {
  detail::CountHostRead();
  return t.to(at::kCPU).contiguous();
}

int64_t HostInt(const at::Tensor& t) {
  SIFT_CHECK(t.numel() == 1, "HostInt: tensor of ", t.numel(), " elements");
  return ToHost(t.to(at::kLong)).data_ptr<int64_t>()[0];  // host: ToHost'd
}

double HostDouble(const at::Tensor& t) {
  SIFT_CHECK(t.numel() == 1, "HostDouble: tensor of ", t.numel(), " elements");
  return ToHost(t.to(at::kDouble)).data_ptr<double>()[0];  // host: ToHost'd
}

std::vector<int64_t> HostInts(const at::Tensor& t) {
  const at::Tensor h = ToHost(t.to(at::kLong)).reshape({-1});
  const int64_t* p = h.data_ptr<int64_t>();  // host: ToHost'd
  return std::vector<int64_t>(p, p + h.numel());
}

}  // namespace sift
