//===- twintrack-opt.cpp - mlir-opt with the twintrack dialect ------------===//
//
// `twintrack-opt --serve PIPELINE` runs one pass pipeline on module after
// module sent on stdin, in one process: the compiler runs passes that may
// abort (the affine super-vectorizer) out of its own process, and a start
// costs ~45 ms where the pipeline takes a few; the compiler also serializes
// half of a model's kernels to PTX here while it serializes the other half.
// A request is a line holding the module's size in bytes, then the module
// (its text or its bytecode); a reply is "ok SIZE\n" and the
// result (printed with its locations), or "error SIZE\n" and the diagnostics.
// A pass that aborts ends the process: the caller starts another.
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/raw_ostream.h"

#include "twintrack/Passes.h"
#include "twintrack/TwintrackDialect.h"

#include <iostream>
#include <string>

namespace {

/// The pipeline's result on one module's text, or why there is none.
bool runPipeline(llvm::StringRef pipeline, const std::string &text, mlir::DialectRegistry &registry,
                 std::string &reply) {
  mlir::MLIRContext context(registry);
  context.disableMultithreading();
  llvm::raw_string_ostream out(reply);
  mlir::ScopedDiagnosticHandler diagnostics(&context, [&](mlir::Diagnostic &diagnostic) {
    out << diagnostic.getLocation() << ": " << diagnostic << "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(text, &context);
  if (!module)
    return false;
  // The pipeline names its anchor (builtin.module(...)): parsed whole, not nested in a module's pass manager.
  mlir::FailureOr<mlir::OpPassManager> parsed = mlir::parsePassPipeline(pipeline, out);
  if (mlir::failed(parsed))
    return false;
  mlir::PassManager passes(&context, parsed->getOpAnchorName());
  static_cast<mlir::OpPassManager &>(passes) = *parsed;
  if (mlir::failed(passes.run(*module)))
    return false;
  reply.clear();
  mlir::OpPrintingFlags flags;
  flags.enableDebugInfo();
  module->print(out, flags);
  return true;
}

int serve(llvm::StringRef pipeline, mlir::DialectRegistry &registry) {
  std::string header;
  while (std::getline(std::cin, header)) {
    std::string text(std::stoul(header), '\0');
    if (!std::cin.read(text.data(), static_cast<std::streamsize>(text.size())))
      return 1;
    std::string reply;
    bool ok = runPipeline(pipeline, text, registry, reply);
    std::cout << (ok ? "ok " : "error ") << reply.size() << "\n" << reply << std::flush;
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::twintrack::registerTwintrackPasses();
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);  // gpu-module-to-binary translates kernels to LLVM IR
  registry.insert<mlir::twintrack::TwintrackDialect>();
  if (argc == 3 && llvm::StringRef(argv[1]) == "--serve")
    return serve(argv[2], registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "twintrack optimizer driver\n", registry));
}
