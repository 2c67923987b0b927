// RUN: %twintrack-opt %s -split-input-file -verify-diagnostics

// Every rule of the twintrack.dispatch verifier, and of its traits.

func.func @argument_count(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'twintrack.dispatch' op has 1 inputs but its region takes 2 arguments}}
  %y = twintrack.dispatch "d" (%x : tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
    twintrack.yield %a : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}

// -----

func.func @argument_type(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{input #0 has type 'tensor<4xf32>' but region argument #0 has type 'tensor<4xf16>'}}
  %y = twintrack.dispatch "d" (%x : tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf16>):
    %c = arith.constant dense<0.0> : tensor<4xf32>
    twintrack.yield %c : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}

// -----

func.func @yield_types(%x: tensor<4xf32>) -> tensor<8xf32> {
  %y = twintrack.dispatch "d" (%x : tensor<4xf32>) -> (tensor<8xf32>) {
  ^bb0(%a: tensor<4xf32>):
    // expected-error @+1 {{yields ('tensor<4xf32>') but the dispatch returns ('tensor<8xf32>')}}
    twintrack.yield %a : tensor<4xf32>
  }
  return %y : tensor<8xf32>
}

// -----

func.func @no_terminator(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{region must end in twintrack.yield}}
  %y = twintrack.dispatch "d" (%x : tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    func.return %a : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}

// -----

// The region is isolated from above: a kernel reads only its inputs.
func.func @captures(%x: tensor<4xf32>, %z: tensor<4xf32>) -> tensor<4xf32> {
  // expected-note @+1 {{required by region isolation constraints}}
  %y = twintrack.dispatch "d" (%x : tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    // expected-error @+1 {{using value defined outside the region}}
    twintrack.yield %z : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}

// -----

func.func @two_blocks(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{region #0 ('body') failed to verify constraint: region with 1 blocks}}
  %y = twintrack.dispatch "d" (%x : tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    cf.br ^bb1
  ^bb1:
    twintrack.yield %a : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}

// -----

func.func @yield_outside(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'twintrack.yield' op expects parent op 'twintrack.dispatch'}}
  twintrack.yield %x : tensor<4xf32>
}

// -----

func.func @missing_label(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expected non-function type}}
  %y = twintrack.dispatch (%x : tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    twintrack.yield %a : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}
