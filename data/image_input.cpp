#include "data/image_input.h"

#include "core/check.h"
#include "data/image_decode.h"
#include "data/pipeline.h"

namespace kiln {

Tensor load_input_image(const std::string& path, const DataConfig& data) {
  const ImageShape source = data.source_image_shape();
  DecodeOptions o;
  o.channels = source.c;
  o.min_side = data.val_transforms.min_source_side();
  o.transforms = std::make_shared<const Pipeline>(data.val_transforms);  // sizes checked at the header
  Image img;
  load_image(path, o, img);
  Pipeline::Workspace ws;
  data.val_transforms.augment(img, /*sample_key=*/0, ws);  // validation transforms draw nothing
  ImageShape want = data.val_transforms.output_shape(source);
  KILN_CHECK(!want.known() || (img.h == want.h && img.w == want.w), "image '", path, "' is ", img.h, "x", img.w,
             " after the validation transforms of data.source=", data.source, "; the model takes ", want.h, "x",
             want.w, " (resize the image, or add resize/center_crop to data.val_transforms)");
  Tensor x = Tensor::empty({1, img.h, img.w, img.c}, DType::f32);
  data.val_transforms.write(img, x.data<float>(), DType::f32);
  return x;
}

}  // namespace kiln
