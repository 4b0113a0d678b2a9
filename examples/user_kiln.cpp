// Example (c): your own `kiln`, with every command (train, eval, predict, export, config, bench, data) and
// your components (my_components.cpp) in it: `user_kiln train --help` lists the keys of "tiny_cnn" and
// "random_invert" beside kiln's own, and `user_kiln predict runs/x img.png` / `user_kiln export runs/x
// format=onnx out=x.onnx` rebuild "tiny_cnn" from a run folder by name (docs/library.md, "Your own kiln").
#include <kiln/tools/cli/cli.h>

int main(int argc, char** argv) { return kiln::cli::main(argc, argv); }
