"""Special functions as compositions of elementwise ATen ops that torch-mlir
lowers (where, arithmetic, exp, log, sqrt, sin, cos, erf, floor, pow,
comparisons). torch-mlir has no lowering for any of these ops.

Covered, and how:

* gamma family. lgamma: Stirling's series after shifting the argument
  above 8 (one log of the product of the shifts), reflection below 1/2.
  digamma: the asymptotic series after a shift by 10, reflection for x < 0
  (through the fractional part, as eager). polygamma: n = 0 digamma, n = 1
  trigamma (eager's reflection through sin(pi x), which keeps eager's huge
  finite values at the poles; a longer asymptotic series), n >= 2
  (-1)^(n+1) n! zeta(n+1, x). mvlgamma is PyTorch's own decomposition into
  lgamma. special_zeta: Hurwitz zeta by Euler-Maclaurin (10 terms, 12
  Bernoulli corrections); for q < 0 (finite only for an integer s) the sum
  splits into three zetas at positive arguments, so any q costs the same.
* error functions. erfc: 1 - erf(x) below 1 (no cancellation there), else
  exp(-x^2) erfcx(x) with x^2 split so that the exponential's argument is
  exact. erfcx: Cephes' rational approximations (1 <= x < 8, 8 <= x <= 50)
  and eager's continued fraction above 50. erfinv: eager's initial rational
  approximation and two Newton steps, in the tails on erfc(x) - (1 - |y|),
  which is exact where erf(x) - y loses digits. ndtri: Cephes' rational
  approximations (eager's). log_ndtr: SciPy's split (as eager) on the
  above, with a log1p that stays accurate for tiny arguments.
* Bessel functions: eager's (Cephes') Chebyshev expansions for i0, i0e, i1,
  i1e, the modified_bessel_i0/i1/k0/k1 and scaled k0/k1; eager's rational
  approximations and asymptotic forms for bessel_j0/j1/y0/y1 (they differ
  from the true functions by up to 1e-6 near x = 5 in float64: eager's
  values are the contract); spherical_bessel_j0 and airy_ai as eager (airy's
  power series with a fixed 10 terms, enough for |x| < 2.09).
* orthogonal polynomials (Chebyshev T/U/V/W and their shifted forms,
  Hermite H/He, Laguerre, Legendre), every overload (a number becomes a
  0-d tensor): eager's recurrences and closed forms, its values at |x| = 1
  and for n < 0, Hermite's NaN past eager's limit degree (128 in float32,
  512 in float64). The recurrence is a loop in which each element takes
  its own n - 1 steps, so any degree gives eager's value. A NaN x gives NaN
  (eager's U/V/W and shifted kinds return an uninitialized value there).
* igamma/igammac: the power series for x < a + 1, Lentz's continued
  fraction otherwise, each a loop that stops per element once its terms
  fall below the dtype's precision (at most 2000 terms, as eager; eager
  switches to an asymptotic expansion for large a ~ x, where these need
  more terms and lose digits).
* hypot (scaled by the larger magnitude), nextafter and frexp (exact powers
  of two built from the exponent's bits: view.dtype does not lower), gcd
  (Euclid's loop, each element as long as it needs) and lcm, angle of
  real inputs.

Dtypes: as eager returns them (integers and bool give the default float
dtype); float16/bfloat16 compute in float32 and round once (eager's opmath),
float32 in float32, float64 in float64. NaN and infinities land where
eager's do, special cases included. No Python control flow depends on a
tensor's values: every branch is a torch.where over both sides.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch
from torch._prims_common import get_computation_dtype  # float32 for half precision: eager's opmath

from .dtypes import is_nan
from .loops import elementwise_while
from .registry import Family

aten = torch.ops.aten

INF, NAN = math.inf, math.nan

# B_2, B_4, ..., B_24: the Bernoulli numbers of the asymptotic series
BERNOULLI = [Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30), Fraction(5, 66),
             Fraction(-691, 2730), Fraction(7, 6), Fraction(-3617, 510), Fraction(43867, 798),
             Fraction(-174611, 330), Fraction(854513, 138), Fraction(-236364091, 2730)]


# ---------------------------------------------------------------- dtypes and small helpers

def _float_op_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype eager returns for a float op over `dtype`: floats keep
    theirs, integers and bool give the default float dtype."""
    return dtype if dtype.is_floating_point else torch.get_default_dtype()


def _is_complex(*values) -> bool:
    return any(isinstance(v, torch.Tensor) and v.is_complex() for v in values)


def _unary(kernel, in_float64: bool = False):
    """A unary float op: the input in its opmath dtype (float64 with
    `in_float64`), the result rounded once."""
    def decomposition(self):
        if _is_complex(self):
            return NotImplemented
        result = _float_op_dtype(self.dtype)
        return kernel(self.to(torch.float64 if in_float64 else get_computation_dtype(result))).to(result)
    decomposition.__name__ = kernel.__name__
    return decomposition


def _as_operand(value, dtype, device):
    """A tensor operand in `dtype`; a Python number as a 0-d tensor of it."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype)
    return torch.full((), value, dtype=dtype, device=device)


def _binary(kernel, in_float64: bool = False):
    """A binary float op over tensors or one number, promoted as eager
    (computed in float64 with `in_float64`)."""
    def decomposition(self, other):
        if _is_complex(self, other):
            return NotImplemented
        result = _float_op_dtype(torch.result_type(self, other))
        device = (self if isinstance(self, torch.Tensor) else other).device
        compute = torch.float64 if in_float64 else get_computation_dtype(result)
        a, b = (_as_operand(v, compute, device) for v in (self, other))
        return kernel(a, b).to(result)
    decomposition.__name__ = kernel.__name__
    return decomposition


def _polevl(x, coefficients):
    """sum(c_i x^(N-i)): Horner's rule, highest power first."""
    result = x * coefficients[0] + coefficients[1]
    for c in coefficients[2:]:
        result = result * x + c
    return result


def _chbevl(x, coefficients):
    """Clenshaw's sum of a Chebyshev series at x/2 (Cephes' chbevl, the
    zero-order coefficient last)."""
    b0, b1, b2 = coefficients[0], 0.0, 0.0
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = x * b1 - b2 + c
    return 0.5 * (b0 - b2)


def _log1p(v):
    """log(1 + v) accurate for tiny v (torch-mlir's log1p is log(1 + v)):
    log(u) scaled by v / (u - 1), the rounding error of u = 1 + v."""
    u = 1 + v
    d = u - 1
    return torch.where(d == 0, v, torch.log(u) * (v / torch.where(d == 0, 1.0, d)))


def _parity_sign(n):
    """(-1)^n for whole-valued n (tensor or Python int)."""
    if isinstance(n, torch.Tensor):
        return torch.where(torch.fmod(n, 2) == 0, 1.0, -1.0)
    return -1.0 if n % 2 else 1.0


# ---------------------------------------------------------------- gamma, digamma, polygamma, zeta

STIRLING = tuple(float(b / (2 * k * (2 * k - 1))) for k, b in enumerate(BERNOULLI[:7], start=1))
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _lgamma(x):
    """log|Gamma(x)|: Stirling's series at y + 8 for y < 8 (lgamma(y) =
    lgamma(y + 8) - log(y (y+1) ... (y+7))), at y itself beyond; reflection
    lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x) below 1/2 (sin of the
    distance to the nearest integer: exact argument reduction). +inf at
    the poles and at +-inf. The shift is one select, not one per step: a
    chain of selects compiles slowly (the fusion's recomputation)."""
    reflected = x < 0.5
    y = torch.where(reflected, 1 - x, x)
    low = y < 8
    near = torch.clamp(y, max=8.0)
    product = near
    for k in range(1, 8):
        product = product * (near + k)
    z = torch.where(low, y + 8, y)
    w = 1 / z
    log_z = torch.log(z)
    series = w * _polevl(w * w, STIRLING[::-1])
    positive = z * (log_z - 1) - 0.5 * log_z + LOG_SQRT_2PI + series - torch.where(low, torch.log(product), 0.0)
    distance = x - torch.round(x)
    # written as -(...) + log(pi): torch-mlir rounds the number of `number - tensor` to float32
    reflection = -(torch.log(torch.abs(torch.sin(math.pi * distance))) + positive) + math.log(math.pi)
    result = torch.where(reflected, reflection, positive)
    pole = (x <= 0) & (x == torch.floor(x))
    return torch.where(pole | (torch.abs(x) == INF), INF, result)


DIGAMMA_SERIES = tuple(float(b / (2 * k)) for k, b in reversed(list(enumerate(BERNOULLI[:7], start=1))))


def _digamma(x):
    """psi(x): the asymptotic series log y - 1/2y - sum B_2k / (2k y^2k) at
    y + 10 for y < 10 (psi(y) = psi(y + 10) - sum 1/(y+k)), at y beyond; reflection
    psi(x) = psi(1 - x) - pi / tan(pi frac(x)) for x < 0. NaN at negative
    integers; -inf at +0 and +inf at -0 (1/y keeps the zero's sign), as eager."""
    negative = x < 0
    y = torch.where(negative, 1 - x, x)
    low = y < 10
    shift = -1 / y
    for k in range(1, 10):
        shift = shift - 1 / (y + k)
    y = torch.where(low, y + 10, y)
    z = 1 / (y * y)
    total = torch.where(low, shift, 0.0) + torch.log(y) - 0.5 / y - z * _polevl(z, DIGAMMA_SERIES)
    fraction = x - torch.trunc(x)
    total = torch.where(negative, total - math.pi / torch.tan(math.pi * fraction), total)
    return torch.where(negative & (fraction == 0), NAN, total)


TRIGAMMA_SERIES = tuple(float(b) for b in reversed(BERNOULLI[:8]))


def _trigamma(x):
    """psi'(x) as eager computes it: pi^2 / sin^2(pi x) - psi'(1 - x) below
    1/2 (sin of pi x itself, so a negative integer gives eager's huge finite
    value and 0 gives inf), 6 shifts, then the asymptotic series
    (1 + 1/2y + sum B_2k / y^2k) / y, to B_16 (eager stops at B_6, 1e-8)."""
    reflected = x < 0.5
    sine = torch.sin(math.pi * x)
    y = torch.where(reflected, 1 - x, x)
    total = torch.where(reflected, -(math.pi ** 2) / (sine * sine), 0.0)
    for _ in range(6):
        total = total + 1 / (y * y)
        y = y + 1
    ixx = 1 / (y * y)
    total = total + (1 + 0.5 / y + ixx * _polevl(ixx, TRIGAMMA_SERIES)) / y
    return torch.where(reflected, -total, total)


# B_2j / (2j)!: the Euler-Maclaurin corrections of the zeta sum
ZETA_CORRECTIONS = tuple(float(b / math.factorial(2 * j)) for j, b in enumerate(BERNOULLI, start=1))
ZETA_TERMS = 10


def _zeta_positive(s, q):
    """Hurwitz zeta sum_k (q + k)^-s for q >= 0: ZETA_TERMS terms, then
    Euler-Maclaurin at a = q + ZETA_TERMS: a^(1-s)/(s-1) + a^-s/2 +
    sum_j B_2j/(2j)! s(s+1)...(s+2j-2) a^(-s-2j+1). q = 0 gives inf."""
    total = torch.pow(q, -s)
    for k in range(1, ZETA_TERMS):
        total = total + torch.pow(q + k, -s)
    a = q + ZETA_TERMS
    power = torch.pow(a, -s)
    total = total + a * power / (s - 1) + 0.5 * power
    rising, scale, inverse_square = s, power / a, 1 / (a * a)
    for j, correction in enumerate(ZETA_CORRECTIONS):
        if j:
            rising = rising * (s + (2 * j - 1)) * (s + 2 * j)
            scale = scale * inverse_square
        total = total + correction * rising * scale
    return total


def _zeta(s, q):
    """Hurwitz zeta(s, q) with eager's special cases: inf at s = 1 and at
    the non-positive integers q; NaN for s < 1, for q < 0 with s not whole,
    and at q = +inf. For q < 0 (s whole) the terms with q + k < 0 are
    (-1)^s (j - f)^-s with f = q - floor(q): zeta(s, q) = zeta(s, f) +
    (-1)^s (zeta(s, 1 - f) - zeta(s, 1 - f - floor(q))), 1 - f = ceil(q) - q. `s` is a tensor
    or a Python number (polygamma's)."""
    negative = q < 0
    floor_q = torch.floor(q)
    fraction = q - floor_q
    complement = torch.ceil(q) - q  # 1 - fraction, exact (fraction rounds to 1 for q = -1e-30)
    near = _zeta_positive(s, torch.where(negative, fraction, q))
    reflected = _zeta_positive(s, torch.where(negative, complement, 1.0))
    far = _zeta_positive(s, torch.where(negative, complement - floor_q, 1.0))
    if not isinstance(s, torch.Tensor):
        result = torch.where(negative, near + _parity_sign(s) * (reflected - far), near)
        if not float(s).is_integer():
            result = torch.where(negative, NAN, result)
        result = torch.where((q <= 0) & (q == floor_q), INF, result)
        result = torch.where(q == INF, NAN, result)
        return result if s > 1 else torch.full_like(q, INF if s == 1 else NAN)
    result = torch.where(negative, near + _parity_sign(s) * (reflected - far), near)
    result = torch.where(negative & (torch.floor(s) != s), NAN, result)
    result = torch.where((q <= 0) & (q == floor_q), INF, result)
    result = torch.where(q == INF, NAN, result)
    return torch.where(s < 1, NAN, torch.where(s == 1, INF, result))


def _polygamma(n, self):
    """polygamma(n, x): digamma, trigamma, else (-1)^(n+1) n! zeta(n+1, x)."""
    if _is_complex(self) or n < 0:
        return NotImplemented
    if n <= 1:
        return _unary(_trigamma if n else _digamma)(self)
    return _unary(lambda x: (-1.0 if n % 2 == 0 else 1.0) * math.factorial(n) * _zeta(float(n + 1), x),
                  in_float64=True)(self)


# ---------------------------------------------------------------- error functions and the normal distribution

# Cephes' erfc: erfc(x) = exp(-x^2) P(x)/Q(x) on [1, 8), R(x)/S(x) on [8, inf)
ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0, 4.86371970985681366614e1,
          1.96520832956077098242e2, 5.26445194995477358631e2, 9.34528527171957607540e2, 1.02755188689515710272e3,
          5.57535335369399327526e2)
ERFC_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2, 9.75708501743205489753e2,
          1.82390916687909736289e3, 2.24633760818710981792e3, 1.65666309194161350182e3, 5.57535340817727675546e2)
ERFC_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0, 6.16021097993053585195e0,
          7.40974269950448939160e0, 2.97886665372100240670e0)
ERFC_S = (1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1, 1.70814450747565897222e1,
          9.60896809063285878198e0, 3.36907645100081516050e0)
INV_SQRT_PI = 1 / math.sqrt(math.pi)


def _erfcx_from_one(x):
    """exp(x^2) erfc(x) for x >= 1 (callers clamp): Cephes' rationals below
    50, eager's continued fraction above (its one-term form past 5e7,
    where x^4 would overflow); 0 at +inf."""
    middle = torch.clamp(x, max=8.0)
    far = torch.clamp(x, 8.0, 50.0)
    huge = torch.clamp(x, min=50.0)
    x2 = torch.clamp(huge, max=5e7) ** 2
    fraction = INV_SQRT_PI * (x2 * (x2 + 4.5) + 2) / (huge * (x2 * (x2 + 5) + 3.75))
    fraction = torch.where(huge > 5e7, INV_SQRT_PI / huge, fraction)
    result = torch.where(x <= 50, _polevl(far, ERFC_R) / _polevl(far, ERFC_S), fraction)
    return torch.where(x < 8, _polevl(middle, ERFC_P) / _polevl(middle, ERFC_Q), result)


def _exp_square(x, sign: float):
    """exp(sign x^2) for |x| <= 30, x^2 split as h^2 + (x - h)(x + h) with
    h = x rounded to 1/16: h^2 is exact, so the large part of the
    exponent carries no rounding error (x^2's would be relative eps x^2)."""
    head = torch.round(x * 16) / 16
    return torch.exp(sign * (head * head)) * torch.exp(sign * ((x - head) * (x + head)))


def _erfc(x):
    """erfc: 1 - erf(x) below 1 (erfc >= 0.157 there: no cancellation),
    exp(-x^2) erfcx(x) above (0 past 30, where both dtypes underflow)."""
    large = torch.clamp(x, 1.0, 30.0)
    tail = torch.where(x > 30, 0.0, _exp_square(large, -1.0) * _erfcx_from_one(large))
    return torch.where(x < 1, 1 - torch.erf(x), tail)


def _erfcx(x):
    """erfcx = exp(x^2) erfc(x): exp(x^2) (1 - erf(x)) below 1 (inf below
    -27, as eager, where exp(x^2) overflows), the rationals above."""
    small = torch.clamp(x, -30.0, 1.0)
    return torch.where(x < 1, _exp_square(small, 1.0) * (1 - torch.erf(small)),
                       _erfcx_from_one(torch.clamp(x, min=1.0)))


# eager's erfinv: an initial rational approximation (Pavlis' erfinv.c), then Newton
ERFINV_A = (-0.140543331, 0.914624893, -1.645349621, 0.886226899)
ERFINV_B = (0.012229801, -0.329097515, 1.442710462, -2.118377725, 1.0)
ERFINV_C = (1.641345311, 3.429567803, -1.624906493, -1.970840454)
ERFINV_D = (1.6370678, 3.5438892, 1.0)


def _erfinv(y):
    """erfinv: eager's initial approximation (central for |y| <= 0.7, tail
    in sqrt(-log((1-|y|)/2)) beyond), then two Newton steps on |y|. In the
    tails the residual is (1 - |y|) - erfc(x) (1 - |y| is exact there),
    not erf(x) - |y|, which loses the digits that matter near +-1.
    +-inf at +-1, NaN beyond."""
    a = torch.abs(y)
    central = a <= 0.7
    z = a * a
    near = a * _polevl(z, ERFINV_A) / _polevl(z, ERFINV_B)
    w = torch.sqrt(-torch.log((1 - torch.clamp(a, max=1.0)) / 2))
    x = torch.where(central, near, _polevl(w, ERFINV_C) / _polevl(w, ERFINV_D))
    for _ in range(2):
        residual = torch.where(central, torch.erf(x) - a, (1 - a) - _erfc(x))
        x = x - residual / (2 * INV_SQRT_PI * torch.exp(-x * x))
    x = torch.where(a == 1, INF, torch.where(a > 1, NAN, x))
    return torch.where(y < 0, -x, x)


# Cephes' ndtri (eager's): p - 1/2 on the center, z = sqrt(-2 log p) in the tails
NDTRI_P0 = (-5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1, 1.39312609387279679503e1,
            -1.23916583867381258016e0)
NDTRI_Q0 = (1.0, 1.95448858338141759834e0, 4.67627912898881538453e0, 8.63602421390890590575e1, -2.25462687854119370527e2,
            2.00260212380060660359e2, -8.20372256168333339912e1, 1.59056225126211695515e1, -1.18331621121330003142e0)
NDTRI_P1 = (4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1, 4.40805073893200834700e1,
            1.46849561928858024014e1, 2.18663306850790267539e0, -1.40256079171354495875e-1, -3.50424626827848203418e-2,
            -8.57456785154685413611e-4)
NDTRI_Q1 = (1.0, 1.57799883256466749731e1, 4.53907635128879210584e1, 4.13172038254672030440e1, 1.50425385692907503408e1,
            2.50464946208309415979e0, -1.42182922854787788574e-1, -3.80806407691578277194e-2, -9.33259480895457427372e-4)
NDTRI_P2 = (3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0, 1.33303460815807542389e0,
            2.01485389549179081538e-1, 1.23716634817820021358e-2, 3.01581553508235416007e-4, 2.65806974686737550832e-6,
            6.23974539184983293730e-9)
NDTRI_Q2 = (1.0, 6.02427039364742014255e0, 3.67983563856160859403e0, 1.37702099489081330271e0, 2.16236993594496635890e-1,
            1.34204006088543189037e-2, 3.28014464682127739104e-4, 2.89247864745380683936e-6, 6.79019408009981274425e-9)
EXP_MINUS_2 = 0.13533528323661269189


def _ndtri(p):
    """The standard normal quantile (Cephes' ndtri, as eager): a rational
    in (p - 1/2)^2 for exp(-2) < p < 1 - exp(-2), else in 1/z with
    z = sqrt(-2 log p) of the smaller tail (one set for z < 8, one beyond).
    -inf at 0, inf at 1, NaN outside [0, 1]."""
    upper = p > 1 - EXP_MINUS_2
    tail = torch.where(upper, 1 - p, p)
    centered = p - 0.5
    square = centered * centered
    middle = (centered + centered * (square * _polevl(square, NDTRI_P0) / _polevl(square, NDTRI_Q0))) * math.sqrt(2 * math.pi)
    z = torch.sqrt(-2 * torch.log(tail))
    inverse = 1 / z
    correction = torch.where(z < 8, _polevl(inverse, NDTRI_P1) / _polevl(inverse, NDTRI_Q1),
                             _polevl(inverse, NDTRI_P2) / _polevl(inverse, NDTRI_Q2))
    far = z - torch.log(z) / z - inverse * correction
    result = torch.where(tail > EXP_MINUS_2, middle, torch.where(upper, far, -far))
    result = torch.where(p == 0, -INF, torch.where(p == 1, INF, result))
    return torch.where((p < 0) | (p > 1), NAN, result)


def _log_ndtr(x):
    """log Phi(x), split as eager (SciPy): log(erfcx(-t)/2) - t^2 below
    x = -1, log1p(-erfc(t)/2) above, t = x / sqrt(2)."""
    t = x * math.sqrt(0.5)
    left = torch.log(_erfcx(-t) / 2) - t * t
    return torch.where(x < -1, left, _log1p(-_erfc(t) / 2))


# ---------------------------------------------------------------- modified Bessel functions (Cephes' Chebyshev series)

I0_A = (-4.41534164647933937950e-18, 3.33079451882223809783e-17, -2.43127984654795469359e-16, 1.71539128555513303061e-15,
        -1.16853328779934516808e-14, 7.67618549860493561688e-14, -4.85644678311192946090e-13, 2.95505266312963983461e-12,
        -1.72682629144155570723e-11, 9.67580903537323691224e-11, -5.18979560163526290666e-10, 2.65982372468238665035e-9,
        -1.30002500998624804212e-8, 6.04699502254191894932e-8, -2.67079385394061173391e-7, 1.11738753912010371815e-6,
        -4.41673835845875056359e-6, 1.64484480707288970893e-5, -5.75419501008210370398e-5, 1.88502885095841655729e-4,
        -5.76375574538582365885e-4, 1.63947561694133579842e-3, -4.32430999505057594430e-3, 1.05464603945949983183e-2,
        -2.37374148058994688156e-2, 4.93052842396707084878e-2, -9.49010970480476444210e-2, 1.71620901522208775349e-1,
        -3.04682672343198398683e-1, 6.76795274409476084995e-1)
I0_B = (-7.23318048787475395456e-18, -4.83050448594418207126e-18, 4.46562142029675999901e-17, 3.46122286769746109310e-17,
        -2.82762398051658348494e-16, -3.42548561967721913462e-16, 1.77256013305652638360e-15, 3.81168066935262242075e-15,
        -9.55484669882830764870e-15, -4.15056934728722208663e-14, 1.54008621752140982691e-14, 3.85277838274214270114e-13,
        7.18012445138366623367e-13, -1.79417853150680611778e-12, -1.32158118404477131188e-11, -3.14991652796324136454e-11,
        1.18891471078464383424e-11, 4.94060238822496958910e-10, 3.39623202570838634515e-9, 2.26666899049817806459e-8,
        2.04891858946906374183e-7, 2.89137052083475648297e-6, 6.88975834691682398426e-5, 3.36911647825569408990e-3,
        8.04490411014108831608e-1)
I1_A = (2.77791411276104639959e-18, -2.11142121435816608115e-17, 1.55363195773620046921e-16, -1.10559694773538630805e-15,
        7.60068429473540693410e-15, -5.04218550472791168711e-14, 3.22379336594557470981e-13, -1.98397439776494371520e-12,
        1.17361862988909016308e-11, -6.66348972350202774223e-11, 3.62559028155211703701e-10, -1.88724975172282928790e-9,
        9.38153738649577178388e-9, -4.44505912879632808065e-8, 2.00329475355213526229e-7, -8.56872026469545474066e-7,
        3.47025130813767847674e-6, -1.32731636560394358279e-5, 4.78156510755005422638e-5, -1.61760815825896745588e-4,
        5.12285956168575772895e-4, -1.51357245063125314899e-3, 4.15642294431288815669e-3, -1.05640848946261981558e-2,
        2.47264490306265168283e-2, -5.29459812080949914269e-2, 1.02643658689847095384e-1, -1.76416518357834055153e-1,
        2.52587186443633654823e-1)
I1_B = (7.51729631084210481353e-18, 4.41434832307170791151e-18, -4.65030536848935832153e-17, -3.20952592199342395980e-17,
        2.96262899764595013876e-16, 3.30820231092092828324e-16, -1.88035477551078244854e-15, -3.81440307243700780478e-15,
        1.04202769841288027642e-14, 4.27244001671195135429e-14, -2.10154184277266431302e-14, -4.08355111109219731823e-13,
        -7.19855177624590851209e-13, 2.03562854414708950722e-12, 1.41258074366137813316e-11, 3.25260358301548823856e-11,
        -1.89749581235054123450e-11, -5.58974346219658380687e-10, -3.83538038596423702205e-9, -2.63146884688951950684e-8,
        -2.51223623787020892529e-7, -3.88256480887769039346e-6, -1.10588938762623716291e-4, -9.76109749136146840777e-3,
        7.78576235018280120474e-1)
K0_A = (1.37446543561352307156e-16, 4.25981614279661018399e-14, 1.03496952576338420167e-11, 1.90451637722020886025e-9,
        2.53479107902614945675e-7, 2.28621210311945178607e-5, 1.26461541144692592338e-3, 3.59799365153615016266e-2,
        3.44289899924628486886e-1, -5.35327393233902768720e-1)
K0_B = (5.30043377268626276149e-18, -1.64758043015242134646e-17, 5.21039150503902756861e-17, -1.67823109680541210385e-16,
        5.51205597852431940784e-16, -1.84859337734377901440e-15, 6.34007647740507060557e-15, -2.22751332699166985548e-14,
        8.03289077536357521100e-14, -2.98009692317273043925e-13, 1.14034058820847496303e-12, -4.51459788337394416547e-12,
        1.85594911495471785253e-11, -7.95748924447710747776e-11, 3.57739728140030116597e-10, -1.69753450938905987466e-9,
        8.57403401741422608519e-9, -4.66048989768794782956e-8, 2.76681363944501510342e-7, -1.83175552271911948767e-6,
        1.39498137188764993662e-5, -1.28495495816278026384e-4, 1.56988388573005337491e-3, -3.14481013119645005427e-2,
        2.44030308206595545468e0)
K1_A = (-7.02386347938628759343e-18, -2.42744985051936593393e-15, -6.66690169419932900609e-13, -1.41148839263352776110e-10,
        -2.21338763073472585583e-8, -2.43340614156596823496e-6, -1.73028895751305206302e-4, -6.97572385963986435018e-3,
        -1.22611180822657148235e-1, -3.53155960776544875667e-1, 1.52530022733894777053e0)
K1_B = (-5.75674448366501715755e-18, 1.79405087314755922667e-17, -5.68946255844285935196e-17, 1.83809354436663880070e-16,
        -6.05704724837331885336e-16, 2.03870316562433424052e-15, -7.01983709041831346144e-15, 2.47715442448130437068e-14,
        -8.97670518232499435011e-14, 3.34841966607842919884e-13, -1.28917396095102890680e-12, 5.13963967348173025100e-12,
        -2.12996783842756842877e-11, 9.21831518760500529508e-11, -4.19035475934189648750e-10, 2.01504975519703286596e-9,
        -1.03457624656780970260e-8, 5.74108412545004946722e-8, -3.50196060308781257119e-7, 2.40648494783721712015e-6,
        -1.93619797416608296024e-5, 1.95215518471351631108e-4, -2.85781685962277938680e-3, 1.03923736576817238437e-1,
        2.72062619048444266945e0)


def _i0e(x):
    """exp(-|x|) I0(x): Chebyshev series on [0, 8] and in 32/|x| beyond."""
    ax = torch.abs(x)
    near = _chbevl(ax / 2 - 2, I0_A)
    far = _chbevl(32 / ax - 2, I0_B) / torch.sqrt(ax)
    return torch.where(ax <= 8, near, far)


def _i0(x):
    """I0(x) as eager: exp(|x|) times the scaled series (NaN at +-inf, where
    eager's exp(x) c / sqrt(x) is inf / inf)."""
    ax = torch.abs(x)
    near = torch.exp(ax) * _chbevl(ax / 2 - 2, I0_A)
    far = torch.exp(ax) * _chbevl(32 / ax - 2, I0_B) / torch.sqrt(ax)
    return torch.where(ax <= 8, near, far)


def _i1e(x):
    """exp(-|x|) I1(x), odd in x."""
    ax = torch.abs(x)
    near = _chbevl(ax / 2 - 2, I1_A) * ax
    far = _chbevl(32 / ax - 2, I1_B) / torch.sqrt(ax)
    result = torch.where(ax <= 8, near, far)
    return torch.where(x < 0, -result, result)


def _i1(x):
    """I1(x) as eager: exp(|x|) times the scaled series, odd in x."""
    ax = torch.abs(x)
    near = torch.exp(ax) * ax * _chbevl(ax / 2 - 2, I1_A)
    far = torch.exp(ax) * _chbevl(32 / ax - 2, I1_B) / torch.sqrt(ax)
    result = torch.where(ax <= 8, near, far)
    return torch.where(x < 0, -result, result)


def _modified_k(near_series, far_series, log_term, scaled: bool):
    """K0/K1 (scaled: times exp(x)): a Chebyshev series in x^2 - 2 plus
    log(x/2) I(x) on (0, 2], exp(-x) times a series in 8/x - 2 over
    sqrt(x) beyond; inf at 0, NaN below."""
    def kernel(x):
        near = near_series(x) + torch.log(0.5 * x) * log_term(x)
        far = far_series(x) / torch.sqrt(x)
        if scaled:
            near = near * torch.exp(x)
        else:
            far = torch.exp(-x) * far
        result = torch.where(x <= 2, near, far)
        return torch.where(x == 0, INF, torch.where(x < 0, NAN, result))
    return kernel


_k0 = _modified_k(lambda x: _chbevl(x * x - 2, K0_A), lambda x: _chbevl(8 / x - 2, K0_B), lambda x: -_i0(x), False)
_k1 = _modified_k(lambda x: _chbevl(x * x - 2, K1_A) / x, lambda x: _chbevl(8 / x - 2, K1_B), _i1, False)
_k0e = _modified_k(lambda x: _chbevl(x * x - 2, K0_A), lambda x: _chbevl(8 / x - 2, K0_B), lambda x: -_i0(x), True)
_k1e = _modified_k(lambda x: _chbevl(x * x - 2, K1_A) / x, lambda x: _chbevl(8 / x - 2, K1_B), _i1, True)


# ---------------------------------------------------------------- Bessel functions of the first and second kind (eager's)

J0_PP = (7.96936729297347051624e-04, 8.28352392107440799803e-02, 1.23953371646414299388e+00, 5.44725003058768775090e+00,
         8.74716500199817011941e+00, 5.30324038235394892183e+00, 9.99999999999999997821e-01)
J0_PQ = (9.24408810558863637013e-04, 8.56288474354474431428e-02, 1.25352743901058953537e+00, 5.47097740330417105182e+00,
         8.76190883237069594232e+00, 5.30605288235394617618e+00, 1.00000000000000000218e+00)
J0_QP = (-1.13663838898469149931e-02, -1.28252718670509318512e+00, -1.95539544257735972385e+01, -9.32060152123768231369e+01,
         -1.77681167980488050595e+02, -1.47077505154951170175e+02, -5.14105326766599330220e+01, -6.05014350600728481186e+00)
J0_QQ = (6.43178256118178023184e+01, 8.56430025976980587198e+02, 3.88240183605401609683e+03, 7.24046774195652478189e+03,
         5.93072701187316984827e+03, 2.06209331660327847417e+03, 2.42005740240291393179e+02)
J0_RP = (-4.79443220978201773821e+09, 1.95617491946556577543e+12, -2.49248344360967716204e+14, 9.70862251047306323952e+15)
J0_RQ = (4.99563147152651017219e+02, 1.73785401676374683123e+05, 4.84409658339962045305e+07, 1.11855537045356834862e+10,
         2.11277520115489217587e+12, 3.10518229857422583814e+14, 3.18121955943204943306e+16, 1.71086294081043136091e+18)
J1_PP = (7.62125616208173112003e-04, 7.31397056940917570436e-02, 1.12719608129684925192e+00, 5.11207951146807644818e+00,
         8.42404590141772420927e+00, 5.21451598682361504063e+00, 1.00000000000000000254e+00)
J1_PQ = (5.71323128072548699714e-04, 6.88455908754495404082e-02, 1.10514232634061696926e+00, 5.07386386128601488557e+00,
         8.39985554327604159757e+00, 5.20982848682361821619e+00, 9.99999999999999997461e-01)
J1_QP = (5.10862594750176621635e-02, 4.98213872951233449420e+00, 7.58238284132545283818e+01, 3.66779609360150777800e+02,
         7.10856304998926107277e+02, 5.97489612400613639965e+02, 2.11688757100572135698e+02, 2.52070205858023719784e+01)
J1_QQ = (7.42373277035675149943e+01, 1.05644886038262816351e+03, 4.98641058337653607651e+03, 9.56231892404756170795e+03,
         7.99704160447350683650e+03, 2.82619278517639096600e+03, 3.36093607810698293419e+02)
J1_RP = (-8.99971225705559398224e+08, 4.52228297998194034323e+11, -7.27494245221818276015e+13, 3.68295732863852883286e+15)
J1_RQ = (6.20836478118054335476e+02, 2.56987256757748830383e+05, 8.35146791431949253037e+07, 2.21511595479792499675e+10,
         4.74914122079991414898e+12, 7.84369607876235854894e+14, 8.95222336184627338078e+16, 5.32278620332680085395e+18)
Y0_YP = (1.55924367855235737965e+04, -1.46639295903971606143e+07, 5.43526477051876500413e+09, -9.82136065717911466409e+11,
         8.75906394395366999549e+13, -3.46628303384729719441e+15, 4.42733268572569800351e+16, -1.84950800436986690637e+16)
Y0_YQ = (1.04128353664259848412e+03, 6.26107330137134956842e+05, 2.68919633393814121987e+08, 8.64002487103935000337e+10,
         2.02979612750105546709e+13, 3.17157752842975028269e+15, 2.50596256172653059228e+17)
Y1_YP = (1.26320474790178026440e+09, -6.47355876379160291031e+11, 1.14509511541823727583e+14, -8.12770255501325109621e+15,
         2.02439475713594898196e+17, -7.78877196265950026825e+17)
Y1_YQ = (5.94301592346128195359e+02, 2.35564092943068577943e+05, 7.34811944459721705660e+07, 1.87601316108706159478e+10,
         3.88231277496238566008e+12, 6.20557727146953693363e+14, 6.87141087355300489866e+16, 3.97270608116560655612e+18)
J0_ZEROS_SQUARED = (5.78318596294678452118e+00, 3.04712623436620863991e+01)
J1_ZEROS_SQUARED = (1.46819706421238932572e+01, 4.92184563216946036703e+01)
SQRT_2_OVER_PI = 0.797884560802865355879892119868763737
TWO_OVER_PI = 0.636619772367581343075535053490057448


def _bessel_far(x, w, order: int, second_kind: bool):
    """J/Y of order 0 or 1 for x > 5: P cos(x - phase) - (5/x) Q sin(x - phase)
    (Y: P sin + (5/x) Q cos) times sqrt(2 / pi x), P and Q rationals in w =
    25/x^2, phase pi/4 or 3 pi/4."""
    pp, pq, qp, qq = (J0_PP, J0_PQ, J0_QP, J0_QQ) if order == 0 else (J1_PP, J1_PQ, J1_QP, J1_QQ)
    p = _polevl(w, pp) / _polevl(w, pq)
    q = 5 / x * (_polevl(w, qp) / _polevl(w, qq))
    angle = x - (math.pi / 4 if order == 0 else 3 * math.pi / 4)
    if second_kind:
        value = p * torch.sin(angle) + q * torch.cos(angle)
    else:
        value = p * torch.cos(angle) - q * torch.sin(angle)
    return value * SQRT_2_OVER_PI / torch.sqrt(x)


def _j0(x):
    """J0 as eager: (z - r1^2)(z - r2^2) RP(z)/RQ(z) in z = x^2 up to 5
    (1 - z/4 below 1e-5), the asymptotic form beyond."""
    x = torch.abs(x)
    z = x * x
    near = (z - J0_ZEROS_SQUARED[0]) * (z - J0_ZEROS_SQUARED[1]) * _polevl(z, J0_RP) / _polevl(z, J0_RQ)
    near = torch.where(x < 1e-5, 1 - z / 4, near)
    return torch.where(x <= 5, near, _bessel_far(x, 25 / z, 0, False))


def _j1(x):
    """J1 as eager: x (z - r1^2)(z - r2^2) RP(z)/RQ(z) up to 5, the
    asymptotic form of |x| beyond, odd in x."""
    ax = torch.abs(x)
    z = x * x
    near = _polevl(z, J1_RP) / _polevl(z, J1_RQ) * x * (z - J1_ZEROS_SQUARED[0]) * (z - J1_ZEROS_SQUARED[1])
    far = _bessel_far(ax, (5 / ax) * (5 / ax), 1, False)
    return torch.where(ax <= 5, near, torch.where(x < 0, -far, far))


def _y0(x):
    """Y0 as eager: YP(z)/YQ(z) + (2/pi) log(x) J0(x) up to 5, the
    asymptotic form beyond; -inf at 0, NaN below."""
    z = x * x
    near = _polevl(z, Y0_YP) / _polevl(z, Y0_YQ) + TWO_OVER_PI * torch.log(x) * _j0(x)
    result = torch.where(x <= 5, near, _bessel_far(x, 25 / z, 0, True))
    return torch.where(x == 0, -INF, torch.where(x < 0, NAN, result))


def _y1(x):
    """Y1 as eager: x YP(z)/YQ(z) + (2/pi)(J1(x) log(x) - 1/x) up to 5,
    the asymptotic form beyond; -inf at 0, NaN below."""
    z = x * x
    near = x * (_polevl(z, Y1_YP) / _polevl(z, Y1_YQ)) + TWO_OVER_PI * (_j1(x) * torch.log(x) - 1 / x)
    result = torch.where(x <= 5, near, _bessel_far(x, (5 / x) * (5 / x), 1, True))
    return torch.where(x == 0, -INF, torch.where(x < 0, NAN, result))


SPHERICAL_J0_SERIES = tuple(float(Fraction((-1) ** k, math.factorial(2 * k + 1))) for k in range(7, -1, -1))


def _spherical_j0(x):
    """sin(x)/x: its Taylor series below 1/2, 0 at +-inf (as eager)."""
    near = _polevl(x * x, SPHERICAL_J0_SERIES)
    result = torch.where(torch.abs(x) < 0.5, near, torch.sin(x) / x)
    return torch.where(torch.abs(x) == INF, 0.0, result)


AIRY_AN = (3.46538101525629032477e-01, 1.20075952739645805542e+01, 7.62796053615234516538e+01, 1.68089224934630576269e+02,
           1.59756391350164413639e+02, 7.05360906840444183113e+01, 1.40264691163389668864e+01, 1.00000000000000000000e+00)
AIRY_AD = (5.67594532638770212846e-01, 1.47562562584847203173e+01, 8.45138970141474626562e+01, 1.77318088145400459522e+02,
           1.64234692871529701831e+02, 7.14778400825575695274e+01, 1.40959135607834029598e+01, 1.00000000000000000000e+00)
AIRY_AFN = (-1.31696323418331795333e-01, -6.26456544431912369773e-01, -6.93158036036933542233e-01,
            -2.79779981545119124951e-01, -4.91900132609500318020e-02, -4.06265923594885404393e-03,
            -1.59276496239262096340e-04, -2.77649108155232920844e-06, -1.67787698489114633780e-08)
AIRY_AFD = (1.33560420706553243746e+01, 3.26825032795224613948e+01, 2.67367040941499554804e+01, 9.18707402907259625840e+00,
            1.47529146771666414581e+00, 1.15687173795188044134e-01, 4.40291641615211203805e-03, 7.54720348287414296618e-05,
            4.51850092970580378464e-07)
AIRY_AGN = (1.97339932091685679179e-02, 3.91103029615688277255e-01, 1.06579897599595591108e+00, 9.39169229816650230044e-01,
            3.51465656105547619242e-01, 6.33888919628925490927e-02, 5.85804113048388458567e-03, 2.82851600836737019778e-04,
            6.98793669997260967291e-06, 8.11789239554389293311e-08, 3.41551784765923618484e-10)
AIRY_AGD = (9.30892908077441974853e+00, 1.98352928718312140417e+01, 1.55646628932864612953e+01, 5.47686069422975497931e+00,
            9.54293611618961883998e-01, 8.64580826352392193095e-02, 4.12656523824222607191e-03, 1.01259085116509135510e-04,
            1.17166733214413521882e-06, 4.91834570062930015649e-09)
AIRY_C1, AIRY_C2 = 0.355028053887817239260, 0.258819403792806798405
AIRY_SERIES_TERMS = 10


def _airy_ai(x):
    """Ai(x) as eager: the oscillating asymptotic form below -2.09, the
    decaying one from 2.09 (0 past 103.892), the Maclaurin series
    c1 f(x) - c2 g(x) between (10 terms of x^3: below 1e-19 for
    |x| < 2.09); NaN at +-inf."""
    left = torch.clamp(x, max=-2.09)
    root = torch.sqrt(-left)
    zeta = -2 * left * root / 3
    z = 1 / zeta
    zz = z * z
    phase = zeta + math.pi / 4
    oscillating = INV_SQRT_PI / torch.sqrt(root) * (
        torch.sin(phase) * (1 + zz * _polevl(zz, AIRY_AFN) / _polevl(zz, AIRY_AFD))
        - torch.cos(phase) * (z * _polevl(zz, AIRY_AGN) / _polevl(zz, AIRY_AGD)))
    right = torch.clamp(x, min=2.09)
    zeta = 2 * right * torch.sqrt(right) / 3
    decaying = INV_SQRT_PI * (_polevl(1 / zeta, AIRY_AN) / _polevl(1 / zeta, AIRY_AD)) / (
        2 * torch.sqrt(torch.sqrt(right)) * torch.exp(zeta))
    middle = torch.clamp(x, -2.09, 2.09)
    cube = middle * middle * middle
    f, g, m, n = 1.0, middle, 1.0, middle
    for i in range(1, AIRY_SERIES_TERMS + 1):
        m = m * cube / ((3 * i - 1) * (3 * i))
        n = n * cube / ((3 * i) * (3 * i + 1))
        f, g = f + m, g + n
    series = AIRY_C1 * f - AIRY_C2 * g
    result = torch.where(x < -2.09, oscillating, torch.where(x >= 2.09, decaying, series))
    result = torch.where(x > 103.892, 0.0, result)
    return torch.where(torch.abs(x) == INF, NAN, result)


# ---------------------------------------------------------------- orthogonal polynomials

HERMITE_LIMIT = {torch.float32: 128, torch.float64: 512}  # eager: NaN past these degrees


def _whole_degree(n):
    """Eager's int64 cast of the degree: truncation; NaN and +-inf (which
    the cast turns into INT64_MIN) become -1."""
    return torch.where(torch.isfinite(n), torch.trunc(n), -1.0)


def _recurrence(step, n, x, first, second, done):
    """P_n for P_0 = first, P_1 = second, P_(k+1) = step(k, P_k, P_(k-1), x):
    a loop in which each element takes its own n - 1 steps (none where
    `done`, whose value the caller sets); `first` for n <= 0."""
    def advance(k, current, previous, n, x):
        return k + 1 < n, k + 1, step(k, current, previous, x), current
    active = (n > 1) & ~done
    current = elementwise_while(advance, active, (torch.ones_like(second), second, first), (n, x))[1]
    return torch.where(n <= 0, first, current)


def _chebyshev_closed(kind: str, shifted: bool, t, n):
    """The closed forms eager takes for |t| < 1 past its threshold degree,
    theta = acos t: T cos(n theta); U sin((n+1) theta)/sin theta; V
    cos((n+1/2) theta)/cos(theta/2); W sin((n+1/2) theta)/sin(theta/2), with
    eager's fallbacks where the denominator's guard fails."""
    theta = torch.acos(torch.clamp(t, -1.0, 1.0))
    if kind == "t":
        return torch.cos(n * theta)
    if kind == "u":
        sine = torch.sin(theta)
        fallback = (n + 1) * torch.cos((n + 1) * theta) / t
        return torch.where(sine != 0, torch.sin((n + 1) * theta) / torch.where(sine != 0, sine, 1.0), fallback)
    odd_sign = _parity_sign(n)
    if kind == "v":
        value = torch.cos((n + 0.5) * theta) / torch.cos(theta / 2)
        return torch.where(torch.sin(theta / 2) != 1, value, odd_sign * (2 * n + 1))
    half_cos = torch.cos(theta / 2)
    value = torch.sin((n + 0.5) * theta) / torch.sin(theta / 2)
    fallback = odd_sign if shifted else torch.where(t > 0, 2 * n + 1, odd_sign * torch.ones_like(t))
    return torch.where(half_cos != 1, value, fallback)


# (threshold degree past which |t| < 1 takes the closed form, plain / shifted)
CHEBYSHEV_THRESHOLD = {"t": (6, 6), "u": (8, 6), "v": (8, 6), "w": (8, 4)}


def _chebyshev_step(k, current, previous, t):
    return (t + t) * current - previous


def _chebyshev(kind: str, shifted: bool):
    """Chebyshev T/U/V/W (shifted: of 2x - 1) as eager: 0 for n < 0; the
    values at t = +-1; the closed form past the threshold for |t| < 1; else
    the recurrence P_(k+1) = 2t P_k - P_(k-1) from 1 and t, 2t, 2t-1, 2t+1."""
    threshold = CHEBYSHEV_THRESHOLD[kind][shifted]

    def kernel(x, n):
        t = x + x - 1 if shifted else x
        two_t = t + t
        second = {"t": t, "u": two_t, "v": two_t - 1, "w": two_t + 1}[kind]
        closed = (n > threshold) & (torch.abs(t) < 1)
        value = _recurrence(_chebyshev_step, n, t, torch.ones_like(t), second, closed | (torch.abs(t) == 1))
        value = torch.where(closed, _chebyshev_closed(kind, shifted, t, n), value)
        sign = _parity_sign(n)
        at_one = {"t": 1.0, "u": n + 1, "v": 1.0, "w": 2 * n + 1}[kind]
        at_minus_one = {"t": sign, "u": sign * (n + 1), "v": sign * (2 * n + 1), "w": sign}[kind]
        value = torch.where(t == 1, at_one, torch.where(t == -1, at_minus_one, value))
        return torch.where(n < 0, 0.0, value)
    return kernel


def _hermite(physicists: bool):
    """Hermite H (H_(k+1) = 2x H_k - 2k H_(k-1)) or He (He_(k+1) = x He_k -
    k He_(k-1)) as eager: NaN past eager's limit degree; 0 for n < 0."""
    scale = 2.0 if physicists else 1.0

    def step(k, current, previous, x):
        return scale * x * current - (scale * k) * previous

    def kernel(x, n):
        beyond = n > HERMITE_LIMIT.get(x.dtype, 128)
        value = torch.where(beyond, NAN, _recurrence(step, n, x, torch.ones_like(x), scale * x, beyond))
        return torch.where(n < 0, 0.0, value)
    return kernel


def _laguerre_step(k, current, previous, x):
    return ((2 * k + 1 - x) * current - k * previous) / (k + 1)


def _laguerre(x, n):
    """Laguerre L (L_(k+1) = ((2k + 1 - x) L_k - k L_(k-1)) / (k+1)) as eager:
    1 at x = 0, 0 for n < 0."""
    value = _recurrence(_laguerre_step, n, x, torch.ones_like(x), 1 - x, x == 0)
    value = torch.where(x == 0, 1.0, value)
    return torch.where(n < 0, 0.0, value)


def _legendre_step(k, current, previous, x):
    return ((2 * k + 1) * x * current - k * previous) / (k + 1)


def _legendre(x, n):
    """Legendre P (P_(k+1) = ((2k+1) x P_k - k P_(k-1)) / (k+1)) as eager:
    +-1 at x = +-1, 0 for n < 0."""
    at_one = torch.abs(x) == 1
    value = _recurrence(_legendre_step, n, x, torch.ones_like(x), x, at_one)
    value = torch.where(at_one, torch.where(x > 0, 1.0, _parity_sign(n) * torch.ones_like(x)), value)
    return torch.where(n < 0, 0.0, value)


def _polynomial(kernel):
    """The three overloads of a polynomial op (x, n), (Scalar x, n), (x,
    Scalar n), promoted as eager; `kernel` takes x and whole degrees in
    the compute dtype."""
    def tensors(x, n):
        if _is_complex(x, n):
            return NotImplemented
        result = _float_op_dtype(torch.result_type(x, n))
        compute = get_computation_dtype(result)
        return kernel(x.to(compute), _whole_degree(n.to(compute))).to(result)

    def x_scalar(x, n):
        if _is_complex(n):
            return NotImplemented
        result = _float_op_dtype(torch.result_type(n, x))
        return tensors(torch.full((), x, dtype=result, device=n.device), n)

    def n_scalar(x, n):
        if _is_complex(x):
            return NotImplemented
        result = _float_op_dtype(torch.result_type(x, n))
        compute = get_computation_dtype(result)
        # eager's int64 cast, in Python: torch-mlir folds a constant's trunc wrongly
        whole = int(n) if math.isfinite(n) else -1
        return kernel(x.to(compute), torch.full_like(x, whole, dtype=compute)).to(result)
    return tensors, x_scalar, n_scalar


# ---------------------------------------------------------------- incomplete gamma

IGAMMA_MAX_TERMS = 2000  # eager's MAXITER; each element stops once its terms no longer count


def _lentz_tiny(dtype) -> float:
    """What Lentz's method puts in place of a vanishing denominator."""
    return torch.finfo(dtype).tiny * 1e6


def _away_from_zero(value, tiny: float):
    return torch.where(torch.abs(value) < tiny, tiny, value)


def _gamma_series_step(term, total, r, count, x):
    """One term of sum x^k / ((a+1)...(a+k)); going on while it still counts."""
    r = r + 1
    term = term * x / r
    total = total + term
    going = (term > torch.finfo(term.dtype).eps * total) & (count < IGAMMA_MAX_TERMS)
    return going, term, total, r, count + 1


def _gamma_fraction_step(i, b, c, d, h, a):
    """One level of Lentz's continued fraction; going on while it still moves h."""
    tiny = _lentz_tiny(a.dtype)
    an = -i * (i - a)
    b = b + 2
    d = 1 / _away_from_zero(an * d + b, tiny)
    c = _away_from_zero(b + an / c, tiny)
    h = h * d * c
    going = (torch.abs(d * c - 1) >= torch.finfo(a.dtype).eps) & (i < IGAMMA_MAX_TERMS)
    return going, i + 1, b, c, d, h


def _regularized_gammas(a, x):
    """(P, Q) = the regularized lower and upper incomplete gamma functions:
    the series P = x^a e^-x / Gamma(a+1) sum x^k / ((a+1)...(a+k)) for
    x < a + 1, else Q = x^a e^-x / Gamma(a) times Lentz's continued fraction
    1/(x+1-a- 1(1-a)/(x+3-a- 2(2-a)/(x+5-a- ...))). Each is a loop in which
    an element stops once its next term is below the dtype's precision."""
    series = x < a + 1
    prefactor = torch.exp(a * torch.log(x) - x - _lgamma(a))
    ones = torch.ones_like(a)
    total = elementwise_while(_gamma_series_step, series, (ones, ones, a, 0 * ones), (x,))[1]
    lower = prefactor * total / a
    b = x + 1 - a
    tiny = _lentz_tiny(a.dtype)
    d = 1 / _away_from_zero(b, tiny)
    h = elementwise_while(_gamma_fraction_step, ~series, (ones, b, ones / tiny, d, d), (a,))[4]
    upper = prefactor * h
    return torch.where(series, lower, 1 - upper), torch.where(series, 1 - lower, upper)


def _incomplete_gamma(upper: bool):
    """igamma (upper=False) or igammac with eager's boundary values: NaN for
    a < 0 or x < 0, a = 0 gives P = 1 for x > 0 (NaN at x = 0), x = 0 gives
    P = 0, a = inf gives P = 0 (NaN with x = inf), x = inf gives P = 1."""
    def kernel(a, x):
        p, q = _regularized_gammas(a, x)
        value = q if upper else p
        p_one, p_zero = (0.0, 1.0) if upper else (1.0, 0.0)   # this function's value where P = 1, P = 0
        value = torch.where(x == INF, p_one, value)
        value = torch.where(a == INF, torch.where(x == INF, NAN, p_zero), value)
        value = torch.where(x == 0, p_zero, value)
        value = torch.where(a == 0, torch.where(x > 0, p_one, NAN), value)
        return torch.where((x < 0) | (a < 0), NAN, value)
    return kernel


# ---------------------------------------------------------------- hypot, nextafter, frexp, gcd, lcm, angle

def _hypot(a, b):
    """sqrt(a^2 + b^2) without overflow: the larger magnitude times
    sqrt(1 + ratio^2); inf if either is infinite (even beside NaN, as C)."""
    x, y = torch.abs(a), torch.abs(b)
    big, small = torch.maximum(x, y), torch.minimum(x, y)
    ratio = small / torch.where(big == 0, 1.0, big)
    result = big * torch.sqrt(1 + ratio * ratio)
    return torch.where((x == INF) | (y == INF), INF, result)


def _mantissa_bits(finfo) -> int:
    return round(-math.log2(finfo.eps))


def _max_exponent(finfo) -> int:
    """The exponent of 2 just past finfo.max (C's max_exp)."""
    return math.floor(math.log2(finfo.max)) + 1


def _power_of_two(exponent, dtype):
    """2^e exactly for whole-valued e in [-2 * max_exp, 2 * max_exp], as two
    factors 2^(e/2) (each an exact power of two in range), both built by
    one square-and-multiply loop over the bits of |e/2|: a loop in the
    graph, whose size does not grow with the dtype's exponent range."""
    half = torch.trunc(exponent / 2)
    rest = exponent - half
    ones = torch.ones_like(exponent)
    state = (torch.abs(half), ones, torch.abs(rest), ones, 2 * ones)
    power_low, power_high = elementwise_while(_square_and_multiply_step, exponent == exponent, state)[1:4:2]
    return (torch.where(half < 0, 1 / power_low, power_low).to(dtype),
            torch.where(rest < 0, 1 / power_high, power_high).to(dtype))


def _square_and_multiply_step(low_bits, low, high_bits, high, multiplier):
    """One bit of both exponents: multiply in 2^(2^k) where the bit is set.
    The multiplier passes the dtype's range only after the last bit used."""
    low = torch.where(torch.fmod(low_bits, 2) == 1, low * multiplier, low)
    high = torch.where(torch.fmod(high_bits, 2) == 1, high * multiplier, high)
    low_bits, high_bits = torch.floor(low_bits / 2), torch.floor(high_bits / 2)
    return (low_bits > 0) | (high_bits > 0), low_bits, low, high_bits, high, multiplier * multiplier


def _exponent(magnitude, finfo):
    """floor(log2 m) for finite m > 0, exactly (log2's estimate corrected
    against exact powers of two), at least finfo's smallest subnormal's."""
    lowest = math.log2(finfo.tiny) - _mantissa_bits(finfo)
    estimate = torch.clamp(torch.floor(torch.log2(magnitude)), lowest, _max_exponent(finfo) - 1)
    low, high = _power_of_two(estimate, magnitude.dtype)
    power = low * high
    return torch.where(power > magnitude, estimate - 1, torch.where(power * 2 <= magnitude, estimate + 1, estimate))


def _nextafter(grid: torch.dtype):
    """nextafter on `grid`'s values (the input dtype's, computed in its
    opmath type): |x| plus or minus the spacing 2^(e - mantissa bits) (half
    that below a power of two); the smallest subnormal from 0; +-max from
    +-inf; y where x == y; NaN with either NaN."""
    finfo = torch.finfo(grid)
    emin = math.log2(finfo.tiny)

    def kernel(x, y):
        magnitude = torch.abs(x)
        finite = torch.where((magnitude == INF) | (magnitude == 0) | is_nan(magnitude), 1.0, magnitude)
        e = torch.clamp(_exponent(finite, finfo), min=emin)
        low, high = _power_of_two(e, x.dtype)
        spacing = low * high * finfo.eps
        at_power = (low * high == finite) & (e > emin)
        away = (y > x) == (x > 0)
        stepped = torch.where(away, finite + spacing, finite - torch.where(at_power, spacing / 2, spacing))
        stepped = torch.where(magnitude == INF, finfo.max, stepped)
        result = torch.where(x < 0, -stepped, stepped)
        smallest = torch.full_like(x, finfo.tiny * finfo.eps)  # a tensor: where(c, number, number) is float32
        result = torch.where(x == 0, torch.where(y > 0, smallest, -smallest), result)
        result = torch.where(x == y, y, result)
        return torch.where(is_nan(x) | is_nan(y), NAN, result)
    return kernel


def _frexp(self):
    """(mantissa, exponent) with |mantissa| in [0.5, 1) and self =
    mantissa 2^exponent; 0, +-inf and NaN keep themselves with exponent 0."""
    if not self.is_floating_point():
        return NotImplemented
    grid = self.dtype
    x = self.to(get_computation_dtype(grid))
    finfo = torch.finfo(grid)
    magnitude = torch.abs(x)
    special = (magnitude == 0) | (magnitude == INF) | is_nan(x)
    finite = torch.where(special, 1.0, magnitude)
    exponent = _exponent(finite, finfo) + 1
    low, high = _power_of_two(-exponent, x.dtype)
    mantissa = torch.where(special, x, x * low * high)
    exponent = torch.where(special, 0.0, exponent)
    return mantissa.to(grid), exponent.to(torch.int32)


def _euclid_step(a, b):
    """(a, b) -> (b mod a, a), with C's remainder; a = 0 divides by 1 (the
    tensor loop steps done elements too)."""
    nonzero = a != 0
    remainder = torch.where(nonzero, torch.fmod(b, torch.where(nonzero, a, 1)), 0)
    return remainder != 0, remainder, a


def _gcd_of(a, b, dtype):
    """gcd(|a|, |b|) by Euclid's loop, each element until its a is 0.
    |minimum integer| wraps to itself, as in eager's `dtype` (so gcd(-128,
    64) is 64 and gcd(-128, 0) is -128 in int8)."""
    a, b = torch.abs(a), torch.abs(b)
    if a.dtype != dtype:
        a, b = a.to(dtype).to(a.dtype), b.to(dtype).to(b.dtype)
    return elementwise_while(_euclid_step, a != 0, (a, b))[1]


def _integer_pair(op):
    """gcd/lcm over integer tensors: computed in int32 for 8- and 16-bit
    dtypes (torch-mlir's 8-bit arithmetic is unreliable; the result wraps as
    eager's C++ int arithmetic does), rounded back to the promoted dtype."""
    def decomposition(self, other):
        dtype = torch.result_type(self, other)
        if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
            return NotImplemented
        compute = torch.int64 if dtype == torch.int64 else torch.int32
        return op(self.to(compute), other.to(compute), dtype).to(dtype)
    return decomposition


def _lcm_of(a, b, dtype):
    """|a / gcd * b| (0 where gcd is 0), wrapping as eager's."""
    g = _gcd_of(a, b, dtype)
    safe = torch.where(g == 0, 1, g)
    return torch.where(g == 0, 0, torch.abs(torch.div(a, safe, rounding_mode="trunc") * b))


def _angle(self):
    """angle of a real tensor: pi below 0, else 0, NaN kept; a float result."""
    if self.is_complex():
        return NotImplemented
    result = _float_op_dtype(self.dtype)
    x = self.to(get_computation_dtype(result)) if self.dtype != torch.bool else self.to(result)
    value = torch.where(x < 0, math.pi, torch.zeros_like(x))
    return torch.where(is_nan(x), NAN, value).to(result)


# ---------------------------------------------------------------- the table

def _nextafter_decomposition(self, other):
    if _is_complex(self, other) or not torch.result_type(self, other).is_floating_point:
        return NotImplemented
    grid = torch.result_type(self, other)
    return _binary(_nextafter(grid))(self, other)


def _polynomial_entries(name: str, kernel) -> dict:
    op = getattr(aten, name)
    tensors, x_scalar, n_scalar = _polynomial(kernel)
    return {op.default: tensors, op.x_scalar: x_scalar, op.n_scalar: n_scalar}


FAMILY = Family("special", {
    aten.lgamma.default: _unary(_lgamma),
    aten.digamma.default: _unary(_digamma),
    aten.polygamma.default: _polygamma,
    aten.special_zeta.default: _binary(_zeta, in_float64=True),
    aten.special_zeta.self_scalar: _binary(_zeta, in_float64=True),
    aten.special_zeta.other_scalar: _binary(_zeta, in_float64=True),
    aten.erfc.default: _unary(_erfc),
    aten.special_erfcx.default: _unary(_erfcx),
    aten.erfinv.default: _unary(_erfinv),
    aten.special_ndtri.default: _unary(_ndtri),
    aten.special_log_ndtr.default: _unary(_log_ndtr),
    aten.i0.default: _unary(_i0),
    aten.special_i0e.default: _unary(_i0e),
    aten.special_i1.default: _unary(_i1),
    aten.special_i1e.default: _unary(_i1e),
    aten.special_modified_bessel_i0.default: _unary(_i0),
    aten.special_modified_bessel_i1.default: _unary(_i1),
    aten.special_modified_bessel_k0.default: _unary(_k0),
    aten.special_modified_bessel_k1.default: _unary(_k1),
    aten.special_scaled_modified_bessel_k0.default: _unary(_k0e),
    aten.special_scaled_modified_bessel_k1.default: _unary(_k1e),
    aten.special_bessel_j0.default: _unary(_j0),
    aten.special_bessel_j1.default: _unary(_j1),
    aten.special_bessel_y0.default: _unary(_y0),
    aten.special_bessel_y1.default: _unary(_y1),
    aten.special_spherical_bessel_j0.default: _unary(_spherical_j0),
    aten.special_airy_ai.default: _unary(_airy_ai),
    **_polynomial_entries("special_chebyshev_polynomial_t", _chebyshev("t", False)),
    **_polynomial_entries("special_chebyshev_polynomial_u", _chebyshev("u", False)),
    **_polynomial_entries("special_chebyshev_polynomial_v", _chebyshev("v", False)),
    **_polynomial_entries("special_chebyshev_polynomial_w", _chebyshev("w", False)),
    **_polynomial_entries("special_shifted_chebyshev_polynomial_t", _chebyshev("t", True)),
    **_polynomial_entries("special_shifted_chebyshev_polynomial_u", _chebyshev("u", True)),
    **_polynomial_entries("special_shifted_chebyshev_polynomial_v", _chebyshev("v", True)),
    **_polynomial_entries("special_shifted_chebyshev_polynomial_w", _chebyshev("w", True)),
    **_polynomial_entries("special_hermite_polynomial_h", _hermite(True)),
    **_polynomial_entries("special_hermite_polynomial_he", _hermite(False)),
    **_polynomial_entries("special_laguerre_polynomial_l", _laguerre),
    **_polynomial_entries("special_legendre_polynomial_p", _legendre),
    aten.igamma.default: _binary(_incomplete_gamma(upper=False)),
    aten.igammac.default: _binary(_incomplete_gamma(upper=True)),
    aten.hypot.default: _binary(_hypot),
    aten.nextafter.default: _nextafter_decomposition,
    aten.frexp.Tensor: _frexp,
    aten.gcd.default: _integer_pair(_gcd_of),
    aten.lcm.default: _integer_pair(_lcm_of),
    aten.angle.default: _angle,
})
