//===- twintrack-opt.cpp - mlir-opt with the twintrack dialect ------------===//

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include "twintrack/Passes.h"
#include "twintrack/TwintrackDialect.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::twintrack::registerTwintrackPasses();
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  registry.insert<mlir::twintrack::TwintrackDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "twintrack optimizer driver\n", registry));
}
