// The training engine's umbrella header, for programs that train through kiln's engine
// (docs/library.md; find_package(kiln COMPONENTS engine), link kiln::engine):
//
//   #include <kiln/engine.h>    // installed: P/include/kiln/engine.h; in the build tree: build/include/kiln/engine.h
//
// brings <kiln/kiln.h> (the base component: cmake/kiln.h) and the engine's entry point,
// kiln::train(config, overrides) -> TrainResult (tools/engine/train_api.h, tools/engine/trainer.h),
// which trains a config naming kiln's components or the program's own (register_model, KILN_REGISTER).
// Only programs include this (the layering test refuses it inside the libraries).
// Tests: tests/engine/umbrella_test.cpp.
#pragma once

#include "kiln.h"  // beside this file, installed and in the build tree

#include "tools/engine/train_api.h"
#include "tools/engine/trainer.h"
