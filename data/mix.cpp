// Batch-level MixUp / CutMix and the flip of a batch (data/mix.h). Tests: tests/data/mix_test.cpp.
#include "data/mix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace kiln {

namespace {
// The stream of a batch's mix draw, forked from the batch's (seed, epoch, index) key; far from the
// small stream numbers pipeline steps use, so it never repeats a sample's augmentation stream.
constexpr uint64_t kMixStream = 0x4d49585550ull;  // "MIXUP"

void check_images(const char* op, const Tensor& images) {
  KILN_CHECK(images.dim() == 4 && images.device().is_cpu(), op, ": images must be (N, H, W, C) on the CPU, got ",
             images.str());
}
}  // namespace

MixupOptions MixupOptions::from_json(const json& j, const std::string& path) {
  MixupOptions o;
  KILN_CHECK(j.is_object(), "config: ", path, " = ", j.dump(),
             " is not accepted; accepted: an object such as {\"mixup_alpha\": 0.8, \"cutmix_alpha\": 1.0, "
             "\"prob\": 1.0, \"switch_prob\": 0.5}");
  JsonReader r(j, path);
  o.mixup_alpha = r.get("mixup_alpha", o.mixup_alpha, 0.0, 1e6);
  o.cutmix_alpha = r.get("cutmix_alpha", o.cutmix_alpha, 0.0, 1e6);
  o.prob = r.get("prob", o.prob, 0.0, 1.0);
  o.switch_prob = r.get("switch_prob", o.switch_prob, 0.0, 1.0);
  r.finish();
  return o;
}

json MixupOptions::to_json() const {
  return json{{"mixup_alpha", mixup_alpha}, {"cutmix_alpha", cutmix_alpha}, {"prob", prob}, {"switch_prob", switch_prob}};
}

double sample_gamma(SampleRng& rng, double a) {
  KILN_CHECK(a > 0, "sample_gamma: shape ", a, " must be > 0");
  if (a < 1) {  // Gamma(a) = Gamma(a + 1) * U^(1/a)
    double u = 1.0 - rng.uniform();  // (0, 1]
    return sample_gamma(rng, a + 1) * std::pow(u, 1.0 / a);
  }
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    // A standard normal by Box-Muller (one of the pair).
    double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
    double x = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = 1.0 - rng.uniform();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

double sample_beta(SampleRng& rng, double a, double b) {
  double x = sample_gamma(rng, a), y = sample_gamma(rng, b);
  return x + y > 0 ? x / (x + y) : 0.5;
}

MixParams draw_mix(const MixupOptions& o, uint64_t seed, int64_t epoch, int64_t batch_index, int64_t h, int64_t w) {
  MixParams p;
  if (!o.enabled()) return p;
  SampleRng rng = SampleRng(SampleRng::sample_key(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(batch_index)))
                      .fork(kMixStream);
  // timm's Mixup._params_per_batch: the same draws, in the same order.
  if (!(rng.uniform() < o.prob)) return p;
  double alpha = o.mixup_alpha;
  if (o.mixup_alpha > 0 && o.cutmix_alpha > 0) {
    p.cutmix = rng.uniform() < o.switch_prob;
    if (p.cutmix) alpha = o.cutmix_alpha;
  } else if (o.cutmix_alpha > 0) {
    p.cutmix = true;
    alpha = o.cutmix_alpha;
  }
  p.mixed = true;
  p.lam = sample_beta(rng, alpha, alpha);
  if (p.cutmix) {  // timm's rand_bbox + cutmix_bbox_and_lam(correct_lam=True)
    const double ratio = std::sqrt(1.0 - p.lam);
    const int64_t cut_h = static_cast<int64_t>(static_cast<double>(h) * ratio);
    const int64_t cut_w = static_cast<int64_t>(static_cast<double>(w) * ratio);
    const int64_t cy = rng.uniform_int(h), cx = rng.uniform_int(w);
    p.y0 = std::clamp<int64_t>(cy - cut_h / 2, 0, h);
    p.y1 = std::clamp<int64_t>(cy + cut_h / 2, 0, h);
    p.x0 = std::clamp<int64_t>(cx - cut_w / 2, 0, w);
    p.x1 = std::clamp<int64_t>(cx + cut_w / 2, 0, w);
    p.lam = 1.0 - static_cast<double>((p.y1 - p.y0) * (p.x1 - p.x0)) / static_cast<double>(h * w);
  }
  return p;
}

namespace {
// out_i = lam x_i + (1 - lam) x_j elementwise over n values, T = float or bf16 bits.
void blend(const float* a, const float* b, float lam, int64_t n, float* out) {
  for (int64_t k = 0; k < n; ++k) out[k] = lam * a[k] + (1.0f - lam) * b[k];
}
void blend(const uint16_t* a, const uint16_t* b, float lam, int64_t n, uint16_t* out) {
  for (int64_t k = 0; k < n; ++k)
    out[k] = float_to_bf16(lam * bf16_to_float(a[k]) + (1.0f - lam) * bf16_to_float(b[k]));
}

template <typename T>
void mix_typed(const T* in, T* out, int64_t N, int64_t H, int64_t W, int64_t C, const MixParams& p) {
  const int64_t img = H * W * C;
  if (!p.cutmix) {
    // NOTE: lam in f32 as timm's x.mul_(lam) on an f32 batch.
    for (int64_t i = 0; i < N; ++i) blend(in + i * img, in + (N - 1 - i) * img, static_cast<float>(p.lam), img, out + i * img);
    return;
  }
  std::memcpy(out, in, static_cast<size_t>(N * img) * sizeof(T));
  const int64_t row = (p.x1 - p.x0) * C;
  if (row <= 0) return;
  for (int64_t i = 0; i < N; ++i) {
    const T* src = in + (N - 1 - i) * img;
    T* dst = out + i * img;
    for (int64_t y = p.y0; y < p.y1; ++y)
      std::memcpy(dst + (y * W + p.x0) * C, src + (y * W + p.x0) * C, static_cast<size_t>(row) * sizeof(T));
  }
}
}  // namespace

Tensor mix_images(const Tensor& images0, const MixParams& p, Tensor out) {
  check_images("mix_images", images0);
  KILN_CHECK(images0.dtype() == DType::f32 || images0.dtype() == DType::bf16,
             "mix_images: images must be f32 or bf16, got ", images0.str());
  if (!p.mixed) return images0;
  Tensor images = images0.contiguous();
  const int64_t N = images.size(0), H = images.size(1), W = images.size(2), C = images.size(3);
  KILN_CHECK(!p.cutmix || (p.y0 >= 0 && p.y0 <= p.y1 && p.y1 <= H && p.x0 >= 0 && p.x0 <= p.x1 && p.x1 <= W),
             "mix_images: the CutMix box does not fit ", images.str());
  if (out.defined())
    KILN_CHECK(out.device().is_cpu() && out.is_contiguous() && out.shape() == images.shape() &&
                   out.dtype() == images.dtype() && out.raw_data() != images.raw_data(),
               "mix_images: the output ", out.str(), " must be a separate contiguous CPU tensor shaped like ",
               images.str());
  else
    out = Tensor::empty(images.shape(), images.dtype());
  if (images.dtype() == DType::f32) mix_typed(images.data<float>(), out.data<float>(), N, H, W, C, p);
  else mix_typed<uint16_t>(images.data_u16(), out.data_u16(), N, H, W, C, p);
  return out;
}

Tensor mix_targets(const Tensor& labels, int64_t K, double lam, double e) {
  KILN_CHECK(labels.dim() == 1 && K > 0, "mix_targets: labels must be (N) and num_classes > 0, got ", labels.str(),
             " and ", K);
  std::vector<int64_t> y = labels.to_int_vector();
  const int64_t N = static_cast<int64_t>(y.size());
  // timm's mixup_target: off = e/K, on = 1 - e + off; y1 * lam + y2 * (1 - lam).
  const double off = e / static_cast<double>(K), on = 1.0 - e + off;
  std::vector<float> t(static_cast<size_t>(N * K));
  for (int64_t i = 0; i < N; ++i) {
    const int64_t a = y[i], b = y[N - 1 - i];
    KILN_CHECK(a >= 0 && a < K, "mix_targets: label ", a, " at index ", i, " is out of range [0, ", K, ")");
    for (int64_t k = 0; k < K; ++k)
      t[i * K + k] = static_cast<float>(lam * (k == a ? on : off) + (1.0 - lam) * (k == b ? on : off));
  }
  return Tensor::from_vector(t, {N, K}, DType::f32);
}

Tensor dominant_labels(const Tensor& labels, double lam) {
  std::vector<int64_t> y = labels.to_int_vector(), out(y.size());
  const size_t N = y.size();
  for (size_t i = 0; i < N; ++i) out[i] = lam >= 0.5 ? y[i] : y[N - 1 - i];
  return Tensor::from_vector(out, {static_cast<int64_t>(N)}, DType::i64);
}

MixedBatch mix_batch(const MixupOptions& o, uint64_t seed, const Batch& b, int64_t num_classes, double label_smoothing,
                     PinnedStaging* staging) {
  MixedBatch m;
  if (!o.enabled()) {
    m.images = b.images;
    m.labels = b.labels;
    return m;
  }
  check_images("mix_batch", b.images);
  m.params = draw_mix(o, seed, b.epoch, b.index, b.images.size(1), b.images.size(2));
  m.images = mix_images(b.images, m.params,
                        staging && m.params.mixed ? staging->buffer(b.images.shape(), b.images.dtype(), 0) : Tensor());
  m.targets = mix_targets(b.labels, num_classes, m.params.lam, label_smoothing);
  m.labels = dominant_labels(b.labels, m.params.lam);
  if (staging) {  // small: copied into their buffers
    m.targets = staging->stage(m.targets, 1);
    m.labels = staging->stage(m.labels, 2);
  }
  return m;
}

Tensor flip_images_lr(const Tensor& images0) {
  check_images("flip_images_lr", images0);
  Tensor images = images0.contiguous();
  const int64_t N = images.size(0), H = images.size(1), W = images.size(2), C = images.size(3);
  const size_t es = dtype_size(images.dtype());
  Tensor out = Tensor::empty(images.shape(), images.dtype());
  const auto* in = static_cast<const unsigned char*>(images.raw_data());
  auto* o = static_cast<unsigned char*>(out.raw_data());
  const size_t px = static_cast<size_t>(C) * es;
  for (int64_t r = 0; r < N * H; ++r)
    for (int64_t x = 0; x < W; ++x)
      std::memcpy(o + (r * W + x) * px, in + (r * W + (W - 1 - x)) * px, px);
  return out;
}

}  // namespace kiln
