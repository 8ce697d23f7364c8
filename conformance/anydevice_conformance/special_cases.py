"""The Array API standard's special cases of element-wise functions, as one table, and the check
that a device follows them.

:data:`TABLE` transcribes the standard's "Special cases" sections (2024.12 edition) into rows
``function | condition | result``:

- a condition names each argument (``x``, or ``x1`` and ``x2``; ``a = real(x)`` and ``b = imag(x)``
  for complex operands) and the class its value must be in (``+0``, ``finite>0``, ``>0&odd``, ...;
  see :data:`CLASSES`);
- a result is a value, or ``real, imag`` for a complex result; a zero or infinity is checked with
  its sign when the standard writes one (``+0``, ``-inf``), so an unsigned ``0`` (the standard's
  ``0j``, ``0 + 0j``) and ``±`` (its "sign ... is unspecified") accept either sign; ``or``
  separates allowed alternatives; an expression of the arguments (``abs(b)``, ``+inf*cos(b)``)
  stands for "the result is ...". ``+NaN`` / ``-NaN`` are NaN with that sign bit (copysign); a
  plain ``NaN`` leaves the sign bit open, and the conditions ``NaN+`` / ``NaN-`` select NaN inputs by
  sign bit (probed with NaN of either sign for the functions that have them).

Functions the standard defines "as if implemented as" another (``cos(x) = cosh(x*1j)``, ``subtract``
as ``add(x1, -x2)``, ...) take their cases from that function (:data:`AS_IF`), and the symmetries it
states (``cosh(conj(x)) == conj(cosh(x))``, ``sinh(-x) == -sinh(x)``) extend the complex rows, which
the standard lists for one quadrant only, to the others (:data:`SYMMETRIES`).

:func:`cases` turns the table into probe inputs with what each must give; :func:`check` runs them
on a device and returns the disagreements.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

import numpy as np

TABLE = """
abs        | x=NaN                     | NaN
abs        | x=-0                      | +0
abs        | x=-inf                    | +inf
abs        | a=±inf b=any              | +inf
abs        | a=any b=±inf              | +inf
abs        | a=±0 b=any                | abs(b)
abs        | a=any b=±0                | abs(a)
abs        | a=NaN b=finite            | NaN
abs        | a=finite b=NaN            | NaN
abs        | a=NaN b=NaN               | NaN

ceil floor trunc round | x=int           | x
ceil floor trunc round | x=+inf          | +inf
ceil floor trunc round | x=-inf          | -inf
ceil floor trunc round | x=+0            | +0
ceil floor trunc round | x=-0            | -0
ceil floor trunc round | x=NaN           | NaN

cos        | x=NaN                     | NaN
cos        | x=±0                      | 1
cos        | x=±inf                    | NaN

cosh       | x=NaN                     | NaN
cosh       | x=±0                      | 1
cosh       | x=±inf                    | +inf
cosh       | a=+0 b=+0                 | 1, 0
cosh       | a=+0 b=+inf               | NaN, ±0
cosh       | a=+0 b=NaN                | NaN, ±0
cosh       | a=finite≠0 b=+inf         | NaN, NaN
cosh       | a=finite≠0 b=NaN          | NaN, NaN
cosh       | a=+inf b=+0               | +inf, 0
cosh       | a=+inf b=finite≠0         | +inf*cos(b), +inf*sin(b)
cosh       | a=+inf b=+inf             | ±inf, NaN
cosh       | a=+inf b=NaN              | +inf, NaN
cosh       | a=NaN b=±0                | NaN, ±0
cosh       | a=NaN b=finite≠0          | NaN, NaN
cosh       | a=NaN b=NaN               | NaN, NaN

exp        | x=NaN                     | NaN
exp        | x=±0                      | 1
exp        | x=+inf                    | +inf
exp        | x=-inf                    | +0
exp        | a=±0 b=+0                 | 1, 0
exp        | a=finite b=+inf           | NaN, NaN
exp        | a=finite b=NaN            | NaN, NaN
exp        | a=+inf b=+0               | +inf, 0
exp        | a=-inf b=finite           | +0*cos(b), +0*sin(b)
exp        | a=+inf b=finite≠0         | +inf*cos(b), +inf*sin(b)
exp        | a=-inf b=+inf             | ±0, ±0
exp        | a=+inf b=+inf             | ±inf, NaN
exp        | a=-inf b=NaN              | ±0, ±0
exp        | a=+inf b=NaN              | ±inf, NaN
exp        | a=NaN b=+0                | NaN, 0
exp        | a=NaN b=≠0                | NaN, NaN

expm1      | x=NaN                     | NaN
expm1      | x=+0                      | +0
expm1      | x=-0                      | -0
expm1      | x=+inf                    | +inf
expm1      | x=-inf                    | -1
expm1      | a=±0 b=+0                 | 0, 0
expm1      | a=finite b=+inf           | NaN, NaN
expm1      | a=finite b=NaN            | NaN, NaN
expm1      | a=+inf b=+0               | +inf, 0
expm1      | a=-inf b=finite           | +0*cos(b) - 1, +0*sin(b)
expm1      | a=+inf b=finite≠0         | +inf*cos(b) - 1, +inf*sin(b)
expm1      | a=-inf b=+inf             | -1, ±0
expm1      | a=+inf b=+inf             | ±inf, NaN
expm1      | a=-inf b=NaN              | -1, ±0
expm1      | a=+inf b=NaN              | ±inf, NaN
expm1      | a=NaN b=+0                | NaN, 0
expm1      | a=NaN b=≠0                | NaN, NaN

isfinite   | x=±inf                    | False
isfinite   | x=NaN                     | False
isfinite   | x=finite                  | True
isfinite   | a=NaN b=any               | False
isfinite   | a=any b=NaN               | False
isfinite   | a=±inf b=any              | False
isfinite   | a=any b=±inf              | False
isfinite   | a=finite b=finite         | True
isinf      | x=±inf                    | True
isinf      | x=!±inf                   | False
isinf      | a=±inf b=any              | True
isinf      | a=!±inf b=±inf            | True
isinf      | a=!±inf b=!±inf           | False
isnan      | x=NaN                     | True
isnan      | x=!NaN                    | False
isnan      | a=NaN b=any               | True
isnan      | a=any b=NaN               | True
isnan      | a=!NaN b=!NaN             | False

log log2 log10 | x=NaN                 | NaN
log log2 log10 | x=<0                  | NaN
log log2 log10 | x=±0                  | -inf
log log2 log10 | x=1                   | +0
log log2 log10 | x=+inf                | +inf
log        | a=-0 b=+0                 | -inf, π
log        | a=+0 b=+0                 | -inf, 0
log log1p  | a=finite b=+inf           | +inf, π/2
log log1p  | a=finite b=NaN            | NaN, NaN
log log1p  | a=-inf b=finite>0         | +inf, π
log log1p  | a=+inf b=finite>0         | +inf, 0
log log1p  | a=-inf b=+inf             | +inf, 3π/4
log log1p  | a=+inf b=+inf             | +inf, π/4
log log1p  | a=±inf b=NaN              | +inf, NaN
log log1p  | a=NaN b=finite            | NaN, NaN
log log1p  | a=NaN b=+inf              | +inf, NaN
log log1p  | a=NaN b=NaN               | NaN, NaN

log1p      | x=NaN                     | NaN
log1p      | x=<-1                     | NaN
log1p      | x=-1                      | -inf
log1p      | x=-0                      | -0
log1p      | x=+0                      | +0
log1p      | x=+inf                    | +inf
log1p      | a=-1 b=+0                 | -inf, 0

sign       | x=<0                      | -1
sign       | x=±0                      | ±0
sign       | x=>0                      | +1
sign       | x=NaN                     | NaN
sign       | a=±0 b=±0                 | 0, 0
sign       | a=NaN b=any               | NaN, NaN
sign       | a=any b=NaN               | NaN, NaN

signbit    | x=+0                      | False
signbit    | x=-0                      | True
signbit    | x=+inf                    | False
signbit    | x=-inf                    | True
signbit    | x=finite>0                | False
signbit    | x=finite<0                | True
signbit    | x=NaN+                    | False
signbit    | x=NaN-                    | True

sin tan    | x=NaN                     | NaN
sin tan    | x=+0                      | +0
sin tan    | x=-0                      | -0
sin tan    | x=±inf                    | NaN

sinh       | x=NaN                     | NaN
sinh       | x=+0                      | +0
sinh       | x=-0                      | -0
sinh       | x=+inf                    | +inf
sinh       | x=-inf                    | -inf
sinh       | a=+0 b=+0                 | +0, 0
sinh       | a=+0 b=+inf               | ±0, NaN
sinh       | a=+0 b=NaN                | ±0, NaN
sinh       | a=finite>0 b=+inf         | NaN, NaN
sinh       | a=finite>0 b=NaN          | NaN, NaN
sinh       | a=+inf b=+0               | +inf, 0
sinh       | a=+inf b=finite>0         | +inf*cos(b), +inf*sin(b)
sinh       | a=+inf b=+inf             | ±inf, NaN
sinh       | a=+inf b=NaN              | ±inf, NaN
sinh       | a=NaN b=+0                | NaN, 0
sinh       | a=NaN b=finite≠0          | NaN, NaN
sinh       | a=NaN b=NaN               | NaN, NaN

sqrt       | x=NaN                     | NaN
sqrt       | x=<0                      | NaN
sqrt       | x=+0                      | +0
sqrt       | x=-0                      | -0
sqrt       | x=+inf                    | +inf
sqrt       | a=±0 b=+0                 | +0, 0
sqrt       | a=any b=+inf              | +inf, +inf
sqrt       | a=finite b=NaN            | NaN, NaN
sqrt       | a=-inf b=NaN              | NaN, ±inf
sqrt       | a=+inf b=NaN              | +inf, NaN
sqrt       | a=NaN b=!±inf             | NaN, NaN

tanh       | x=NaN                     | NaN
tanh       | x=+0                      | +0
tanh       | x=-0                      | -0
tanh       | x=+inf                    | +1
tanh       | x=-inf                    | -1
tanh       | a=+0 b=+0                 | +0, 0
tanh       | a=finite≠0 b=+inf         | NaN, NaN
tanh       | a=+0 b=+inf               | +0, NaN
tanh       | a=finite≠0 b=NaN          | NaN, NaN
tanh       | a=+0 b=NaN                | +0, NaN
tanh       | a=+inf b=finite>0         | 1, 0
tanh       | a=+inf b=+inf             | 1, ±0
tanh       | a=+inf b=NaN              | 1, ±0
tanh       | a=NaN b=+0                | NaN, 0
tanh       | a=NaN b=≠0                | NaN, NaN

acos       | x=NaN                     | NaN
acos       | x=>1                      | NaN
acos       | x=<-1                     | NaN
acos       | x=1                       | +0
acos       | a=±0 b=+0                 | π/2, -0
acos       | a=±0 b=NaN                | π/2, NaN
acos       | a=finite b=+inf           | π/2, -inf
acos       | a=finite≠0 b=NaN          | NaN, NaN
acos       | a=-inf b=finite>0         | π, -inf
acos       | a=+inf b=finite>0         | +0, -inf
acos       | a=-inf b=+inf             | 3π/4, -inf
acos       | a=+inf b=+inf             | π/4, -inf
acos       | a=±inf b=NaN              | NaN, ±inf
acos       | a=NaN b=finite            | NaN, NaN
acos       | a=NaN b=+inf              | NaN, -inf
acos       | a=NaN b=NaN               | NaN, NaN

acosh      | x=NaN                     | NaN
acosh      | x=<1                      | NaN
acosh      | x=1                       | +0
acosh      | x=+inf                    | +inf
acosh      | a=±0 b=+0                 | +0, π/2
acosh      | a=finite b=+inf           | +inf, π/2
acosh      | a=finite≠0 b=NaN          | NaN, NaN
acosh      | a=+0 b=NaN                | NaN, π/2 or NaN, -π/2
acosh      | a=-inf b=finite>0         | +inf, π
acosh      | a=+inf b=finite>0         | +inf, 0
acosh      | a=-inf b=+inf             | +inf, 3π/4
acosh      | a=+inf b=+inf             | +inf, π/4
acosh      | a=±inf b=NaN              | +inf, NaN
acosh      | a=NaN b=finite            | NaN, NaN
acosh      | a=NaN b=+inf              | +inf, NaN
acosh      | a=NaN b=NaN               | NaN, NaN

asin       | x=NaN                     | NaN
asin       | x=>1                      | NaN
asin       | x=<-1                     | NaN
asin       | x=+0                      | +0
asin       | x=-0                      | -0

asinh      | x=NaN                     | NaN
asinh      | x=+0                      | +0
asinh      | x=-0                      | -0
asinh      | x=+inf                    | +inf
asinh      | x=-inf                    | -inf
asinh      | a=+0 b=+0                 | +0, 0
asinh      | a=finite>0 b=+inf         | +inf, π/2
asinh      | a=finite b=NaN            | NaN, NaN
asinh      | a=+inf b=finite>0         | +inf, 0
asinh      | a=+inf b=+inf             | +inf, π/4
asinh      | a=NaN b=+0                | NaN, 0
asinh      | a=NaN b=finite≠0          | NaN, NaN
asinh      | a=NaN b=+inf              | ±inf, NaN
asinh      | a=NaN b=NaN               | NaN, NaN

atan       | x=NaN                     | NaN
atan       | x=+0                      | +0
atan       | x=-0                      | -0
atan       | x=+inf                    | π/2
atan       | x=-inf                    | -π/2

atan2      | x1=NaN x2=any             | NaN
atan2      | x1=any x2=NaN             | NaN
atan2      | x1=>0 x2=+0               | π/2
atan2      | x1=>0 x2=-0               | π/2
atan2      | x1=+0 x2=>0               | +0
atan2      | x1=+0 x2=+0               | +0
atan2      | x1=+0 x2=-0               | π
atan2      | x1=+0 x2=<0               | π
atan2      | x1=-0 x2=>0               | -0
atan2      | x1=-0 x2=+0               | -0
atan2      | x1=-0 x2=-0               | -π
atan2      | x1=-0 x2=<0               | -π
atan2      | x1=<0 x2=+0               | -π/2
atan2      | x1=<0 x2=-0               | -π/2
atan2      | x1=finite>0 x2=+inf       | +0
atan2      | x1=finite>0 x2=-inf       | π
atan2      | x1=finite<0 x2=+inf       | -0
atan2      | x1=finite<0 x2=-inf       | -π
atan2      | x1=+inf x2=finite         | π/2
atan2      | x1=-inf x2=finite         | -π/2
atan2      | x1=+inf x2=+inf           | π/4
atan2      | x1=+inf x2=-inf           | 3π/4
atan2      | x1=-inf x2=+inf           | -π/4
atan2      | x1=-inf x2=-inf           | -3π/4

atanh      | x=NaN                     | NaN
atanh      | x=<-1                     | NaN
atanh      | x=>1                      | NaN
atanh      | x=-1                      | -inf
atanh      | x=1                       | +inf
atanh      | x=+0                      | +0
atanh      | x=-0                      | -0
atanh      | a=+0 b=+0                 | +0, 0
atanh      | a=+0 b=NaN                | +0, NaN
atanh      | a=1 b=+0                  | +inf, 0
atanh      | a=finite>0 b=+inf         | +0, π/2
atanh      | a=finite≠0 b=NaN          | NaN, NaN
atanh      | a=+inf b=finite>0         | +0, π/2
atanh      | a=+inf b=+inf             | +0, π/2
atanh      | a=+inf b=NaN              | +0, NaN
atanh      | a=NaN b=finite            | NaN, NaN
atanh      | a=NaN b=+inf              | ±0, π/2
atanh      | a=NaN b=NaN               | NaN, NaN

copysign   | x1=!NaN x2=<0             | -abs(x1)
copysign   | x1=!NaN x2=-0             | -abs(x1)
copysign   | x1=!NaN x2=+0             | abs(x1)
copysign   | x1=!NaN x2=>0             | abs(x1)
copysign   | x1=!NaN x2=NaN-           | -abs(x1)
copysign   | x1=!NaN x2=NaN+           | abs(x1)
copysign   | x1=NaN x2=<0              | -NaN
copysign   | x1=NaN x2=-0              | -NaN
copysign   | x1=NaN x2=+0              | +NaN
copysign   | x1=NaN x2=>0              | +NaN
copysign   | x1=NaN x2=NaN-            | -NaN
copysign   | x1=NaN x2=NaN+            | +NaN

add        | x1=NaN x2=any             | NaN
add        | x1=any x2=NaN             | NaN
add        | x1=+inf x2=-inf           | NaN
add        | x1=-inf x2=+inf           | NaN
add        | x1=+inf x2=+inf           | +inf
add        | x1=-inf x2=-inf           | -inf
add        | x1=+inf x2=finite         | +inf
add        | x1=-inf x2=finite         | -inf
add        | x1=finite x2=+inf         | +inf
add        | x1=finite x2=-inf         | -inf
add        | x1=-0 x2=-0               | -0
add        | x1=-0 x2=+0               | +0
add        | x1=+0 x2=-0               | +0
add        | x1=+0 x2=+0               | +0
add        | x1=±0 x2=finite≠0         | x2
add        | x1=finite≠0 x2=±0         | x1
add        | x1=finite≠0 x2=-x1        | +0

divide floor_divide | x1=NaN x2=any      | NaN
divide floor_divide | x1=any x2=NaN      | NaN
divide floor_divide | x1=±inf x2=±inf    | NaN
divide floor_divide | x1=±0 x2=±0        | NaN
divide floor_divide | x1=+0 x2=>0        | +0
divide floor_divide | x1=-0 x2=>0        | -0
divide floor_divide | x1=+0 x2=<0        | -0
divide floor_divide | x1=-0 x2=<0        | +0
divide floor_divide | x1=>0 x2=+0        | +inf
divide floor_divide | x1=>0 x2=-0        | -inf
divide floor_divide | x1=<0 x2=+0        | -inf
divide floor_divide | x1=<0 x2=-0        | +inf
divide     | x1=+inf x2=finite>0       | +inf
divide     | x1=+inf x2=finite<0       | -inf
divide     | x1=-inf x2=finite>0       | -inf
divide     | x1=-inf x2=finite<0       | +inf
divide     | x1=finite>0 x2=+inf       | +0
divide     | x1=finite>0 x2=-inf       | -0
divide     | x1=finite<0 x2=+inf       | -0
divide     | x1=finite<0 x2=-inf       | +0

equal      | x1=NaN x2=any             | False
equal      | x1=any x2=NaN             | False
equal      | x1=+inf x2=+inf           | True
equal      | x1=-inf x2=-inf           | True
equal      | x1=±0 x2=±0               | True
not_equal  | x1=NaN x2=any             | True
not_equal  | x1=any x2=NaN             | True
not_equal  | x1=+inf x2=-inf           | True
not_equal  | x1=-inf x2=+inf           | True

floor_divide | x1=+inf x2=finite>0     | +inf or NaN
floor_divide | x1=+inf x2=finite<0     | -inf or NaN
floor_divide | x1=-inf x2=finite>0     | -inf or NaN
floor_divide | x1=-inf x2=finite<0     | +inf or NaN
floor_divide | x1=finite>0 x2=+inf     | +0
floor_divide | x1=finite>0 x2=-inf     | -0 or -1
floor_divide | x1=finite<0 x2=+inf     | -0 or -1
floor_divide | x1=finite<0 x2=-inf     | +0

hypot      | x1=±inf x2=any            | +inf
hypot      | x1=any x2=±inf            | +inf
hypot      | x1=±0 x2=any              | abs(x2)
hypot      | x1=any x2=±0              | abs(x1)
hypot      | x1=finite x2=NaN          | NaN
hypot      | x1=NaN x2=!±inf           | NaN

logaddexp  | x1=NaN x2=any             | NaN
logaddexp  | x1=any x2=NaN             | NaN
logaddexp  | x1=+inf x2=!NaN           | +inf
logaddexp  | x1=!NaN x2=+inf           | +inf

nextafter  | x1=NaN x2=any             | NaN
nextafter  | x1=any x2=NaN             | NaN
nextafter  | x1=-0 x2=+0               | +0
nextafter  | x1=+0 x2=-0               | -0

maximum minimum | x1=NaN x2=any        | NaN
maximum minimum | x1=any x2=NaN        | NaN

multiply   | x1=NaN x2=any             | NaN
multiply   | x1=any x2=NaN             | NaN
multiply   | x1=±inf x2=±0             | NaN
multiply   | x1=±0 x2=±inf             | NaN
multiply   | x1=+inf x2=>0             | +inf
multiply   | x1=+inf x2=<0             | -inf
multiply   | x1=-inf x2=>0             | -inf
multiply   | x1=-inf x2=<0             | +inf
multiply   | x1=>0 x2=+inf             | +inf
multiply   | x1=<0 x2=+inf             | -inf
multiply   | x1=>0 x2=-inf             | -inf
multiply   | x1=<0 x2=-inf             | +inf
multiply   | x1=+0 x2=finite&+         | +0
multiply   | x1=+0 x2=finite&-         | -0
multiply   | x1=-0 x2=finite&+         | -0
multiply   | x1=-0 x2=finite&-         | +0
multiply   | x1=finite&+ x2=+0         | +0
multiply   | x1=finite&- x2=+0         | -0
multiply   | x1=finite&+ x2=-0         | -0
multiply   | x1=finite&- x2=-0         | +0

pow        | x1=≠1 x2=NaN              | NaN
pow        | x1=any x2=±0              | 1
pow        | x1=NaN x2=≠0              | NaN
pow        | x1=abs>1 x2=+inf           | +inf
pow        | x1=abs>1 x2=-inf           | +0
pow        | x1=abs=1 x2=±inf           | 1
pow        | x1=1 x2=!NaN              | 1
pow        | x1=abs<1 x2=+inf           | +0
pow        | x1=abs<1 x2=-inf           | +inf
pow        | x1=+inf x2=>0             | +inf
pow        | x1=+inf x2=<0             | +0
pow        | x1=-inf x2=>0&odd         | -inf
pow        | x1=-inf x2=>0&!odd        | +inf
pow        | x1=-inf x2=<0&odd         | -0
pow        | x1=-inf x2=<0&!odd        | +0
pow        | x1=+0 x2=>0               | +0
pow        | x1=+0 x2=<0               | +inf
pow        | x1=-0 x2=>0&odd           | -0
pow        | x1=-0 x2=>0&!odd          | +0
pow        | x1=-0 x2=<0&odd           | -inf
pow        | x1=-0 x2=<0&!odd          | +inf
pow        | x1=finite<0 x2=finite&!int | NaN

remainder  | x1=NaN x2=any             | NaN
remainder  | x1=any x2=NaN             | NaN
remainder  | x1=±inf x2=±inf           | NaN
remainder  | x1=±0 x2=±0               | NaN
remainder  | x1=+0 x2=>0               | +0
remainder  | x1=-0 x2=>0               | +0
remainder  | x1=+0 x2=<0               | -0
remainder  | x1=-0 x2=<0               | -0
remainder  | x1=>0 x2=±0               | NaN
remainder  | x1=<0 x2=±0               | NaN
remainder  | x1=±inf x2=finite≠0       | NaN
remainder  | x1=finite>0 x2=+inf       | x1
remainder  | x1=finite>0 x2=-inf       | x2
remainder  | x1=finite<0 x2=+inf       | x2
remainder  | x1=finite<0 x2=-inf       | x1
"""
# Left out: sqrt's rows for a = -infinity and a = +infinity with a positive finite b ("NaN + NaN j"
# and "+0 + infinity j"), which contradict C99 (+0 + infinity j and +infinity + 0j: the two results
# are swapped and one lost) and the standard's own branch-cut note; and every row that
# relates two arguments by sign only ("have the same mathematical sign"), which the rows of
# multiply above spell out for zeros and infinities.

#: "As if implemented as": function -> (base function, arguments from the inputs, result from
#: the base's result). ``j(z)`` is z*1j, exact on each component; complex only where marked.
AS_IF = {
    "subtract": ("add", lambda x1, x2: (x1, -x2), lambda r: r, "real"),
    "square": ("multiply", lambda x: (x, x), lambda r: r, "real"),
    "reciprocal": ("divide", lambda x: (1.0, x), lambda r: r, "real"),
    "cos": ("cosh", lambda z: (_times_j(z),), lambda r: r, "complex"),
    "sin": ("sinh", lambda z: (_times_j(z),), lambda r: _times_minus_j(r), "complex"),
    "tan": ("tanh", lambda z: (_times_j(z),), lambda r: _times_minus_j(r), "complex"),
    "asin": ("asinh", lambda z: (_times_j(z),), lambda r: _times_minus_j(r), "complex"),
    "atan": ("atanh", lambda z: (_times_j(z),), lambda r: _times_minus_j(r), "complex"),
    "log2": ("log", lambda z: (z,), lambda r: _scaled(r, 1 / math.log(2.0)), "complex"),
    "log10": ("log", lambda z: (z,), lambda r: _scaled(r, 1 / math.log(10.0)), "complex"),
}
#: Symmetries the standard states for complex operands: ``conj`` (f(conj(x)) == conj(f(x))),
#: ``even`` (f(-x) == f(x)), ``odd`` (f(-x) == -f(x)).
SYMMETRIES = {
    "exp": ("conj",), "expm1": ("conj",), "log": ("conj",), "log1p": ("conj",), "sqrt": ("conj",),
    "cosh": ("conj", "even"), "sinh": ("conj", "odd"), "tanh": ("conj", "odd"),
    "acos": ("conj",), "acosh": ("conj",), "asinh": ("conj", "odd"), "atanh": ("conj", "odd"),
}


def _odd(v):
    return math.isfinite(v) and v == math.floor(v) and math.fmod(v, 2.0) != 0


def _int(v):
    return math.isfinite(v) and v == math.floor(v)


#: Value classes of the conditions; ``!c`` is the complement of ``c`` and ``c&d`` both.
CLASSES = {
    "any": lambda v: True,
    "NaN": math.isnan,
    "+0": lambda v: v == 0 and math.copysign(1.0, v) > 0,
    "-0": lambda v: v == 0 and math.copysign(1.0, v) < 0,
    "±0": lambda v: v == 0,
    "+inf": lambda v: v == math.inf,
    "-inf": lambda v: v == -math.inf,
    "±inf": math.isinf,
    "finite": math.isfinite,
    "finite>0": lambda v: math.isfinite(v) and v > 0,
    "finite<0": lambda v: math.isfinite(v) and v < 0,
    "finite≠0": lambda v: math.isfinite(v) and v != 0,
    "+": lambda v: not math.isnan(v) and math.copysign(1.0, v) > 0,  # sign bit clear
    "-": lambda v: not math.isnan(v) and math.copysign(1.0, v) < 0,  # sign bit set
    ">0": lambda v: v > 0,
    "<0": lambda v: v < 0,
    "1": lambda v: v == 1,
    "-1": lambda v: v == -1,
    "<-1": lambda v: v < -1,
    ">1": lambda v: v > 1,
    "<1": lambda v: v < 1,
    "NaN+": lambda v: math.isnan(v) and math.copysign(1.0, v) > 0,  # NaN with the sign bit clear
    "NaN-": lambda v: math.isnan(v) and math.copysign(1.0, v) < 0,  # NaN with the sign bit set
    "≠1": lambda v: not v == 1,
    "≠0": lambda v: not v == 0,
    "abs>1": lambda v: abs(v) > 1,
    "abs<1": lambda v: abs(v) < 1,
    "abs=1": lambda v: abs(v) == 1,
    "int": _int,
    "odd": _odd,
}
#: Probe values of each argument (a and b alike for complex operands).
REAL_PROBES = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5)
COMPLEX_PROBES = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -2.5)


@dataclass(frozen=True)
class Expect:
    """One allowed component value: ``signed`` False leaves the sign of a zero or infinity open."""

    value: object
    signed: bool = True
    nan_sign: bool = False  # a NaN whose sign bit is checked (``+NaN``, ``-NaN``)

    def neg(self):
        return Expect(-self.value if not isinstance(self.value, bool) else self.value, self.signed, self.nan_sign)

    def text(self) -> str:
        v = self.value
        if isinstance(v, bool):
            return str(v)
        s = "NaN" if math.isnan(v) else ("inf" if math.isinf(v) else ("0" if v == 0 else f"{v:.6g}"))
        if self.nan_sign and math.isnan(v):
            return ("-" if math.copysign(1.0, v) < 0 else "+") + s
        if (math.isinf(v) or v == 0) and not math.isnan(v):
            s = ("±" if not self.signed else ("-" if math.copysign(1.0, v) < 0 else "+")) + s
        return s


@dataclass(frozen=True)
class Row:
    func: str
    names: tuple  # ("x",), ("x1", "x2") or ("a", "b")
    conds: tuple  # one class expression per name
    result: tuple  # alternatives; each a tuple of component expressions
    text: str

    @property
    def complex(self) -> bool:
        return self.names == ("a", "b")


def _matches(expr: str, v: float, args: dict) -> bool:
    if expr.startswith("-x"):  # relation to another argument: "x2 is -x1"
        w = -args[expr[1:]]
        return v == w and math.copysign(1.0, v) == math.copysign(1.0, w)
    for part in expr.split("&"):
        neg = part.startswith("!")
        ok = CLASSES[part[1:] if neg else part](v)
        if ok == neg:
            return False
    return True


_NUM = re.compile(r"(?<![\w.])([+-]?)0(?![\w.])")


def _component(src: str, args: dict) -> Expect:
    src = src.strip()
    if src in ("True", "False"):
        return Expect(src == "True")
    signed = not src.startswith("±") and src != "0"
    py = src.lstrip("±").replace("NaN", "nan")
    py = re.sub(r"(\d)π", r"\1*pi", py).replace("π", "pi")
    py = _NUM.sub(lambda m: f"{m.group(1)}0.0", py)
    env = {"nan": math.nan, "inf": math.inf, "pi": math.pi, "cos": math.cos, "sin": math.sin, "abs": abs, **args}
    if src in ("+NaN", "-NaN"):
        return Expect(math.copysign(math.nan, -1.0 if src[0] == "-" else 1.0), True, True)
    return Expect(float(eval(py, {"__builtins__": {}}, env)) if py not in ("True", "False") else py == "True", signed)


def _parse(table: str) -> list:
    rows = []
    for line in table.strip().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        funcs, cond, result = (p.strip() for p in line.split("|", 2)) if line.count("|") >= 2 else (None,) * 3
        if funcs is None:
            raise ValueError(f"special-case row {line!r} is not 'function | condition | result'")
        pairs = [c.split("=", 1) for c in cond.split()]
        names, conds = tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
        if names not in (("x",), ("x1", "x2"), ("a", "b")):
            raise ValueError(f"special-case row {line!r}: arguments must be x, x1 x2 or a b, not {names}")
        alts = tuple(tuple(_split_components(alt)) for alt in result.split(" or "))
        for f in funcs.split():
            rows.append(Row(f, names, conds, alts, f"{f}: {cond} -> {result}"))
    return rows


def _split_components(alt: str) -> list:
    depth, out, cur = 0, [], ""
    for ch in alt:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


ROWS = _parse(TABLE)


# --- exact component transforms (the "as if" relations and the symmetries) --------------------
def _times_j(z: complex) -> complex:
    return complex(-z.imag, z.real)


def _times_minus_j(r: tuple) -> tuple:
    return (r[1], r[0].neg()) if len(r) == 2 else r


def _scaled(r: tuple, k: float) -> tuple:
    return tuple(Expect(e.value * k, e.signed) if not isinstance(e.value, bool) else e for e in r)


def _conj(r: tuple) -> tuple:
    return (r[0], r[1].neg()) if len(r) == 2 else r


def _negate(r: tuple) -> tuple:
    return tuple(e.neg() for e in r)


@dataclass
class Case:
    """One probe input and what each row that applies to it requires."""

    args: tuple  # floats, or one complex
    wants: list  # [(row text, [alternatives: tuple of Expect])]


def _direct(func: str, args: tuple, complex_: bool) -> list:
    out = []
    for row in ROWS:
        if row.func != func or row.complex != complex_:
            continue
        vals = (args[0].real, args[0].imag) if complex_ else args
        if len(vals) != len(row.names):
            continue
        env = dict(zip(row.names, vals))
        if all(_matches(c, v, env) for c, v in zip(row.conds, vals)):
            out.append((row.text, [tuple(_component(c, env) for c in alt) for alt in row.result]))
    return out


def _symmetries(func: str) -> list:
    """(name, input map, result map) of every composition of ``func``'s symmetries but the identity:
    f(z) = post(f(pre(z))), each map exact on the components."""
    out = [("", lambda z: z, lambda r: r)]
    for sym in SYMMETRIES.get(func, ()):
        pre, post = {"conj": (lambda z: z.conjugate(), _conj), "even": (lambda z: -z, lambda r: r),
                     "odd": (lambda z: -z, _negate)}[sym]
        out += [((f"{n}, " if n else "") + f"{sym} symmetry", lambda z, p=p, q=pre: q(p(z)),
                 lambda r, p=pp, q=post: p(q(r))) for n, p, pp in out]
    return out[1:]


def _wants(func: str, args: tuple, complex_: bool) -> list:
    out = _direct(func, args, complex_)
    if complex_:
        for name, pre, post in _symmetries(func):
            out += [(f"{t} [{name}]", [post(a) for a in alts]) for t, alts in _direct(func, (pre(args[0]),), True)]
    base = AS_IF.get(func)
    if base is not None and base[3] in ("all", "complex" if complex_ else "real"):
        name, pre, post = base[:3]
        inner = pre(*args)
        for t, alts in _wants(name, inner, complex_):
            out.append((f"{t} [{func} as if {name}]", [post(a) for a in alts]))
    return out


def functions() -> list:
    """Every function with special cases (its own rows or "as if" another's)."""
    return sorted({r.func for r in ROWS} | set(AS_IF))


@functools.cache
def cases(func: str, complex_: bool) -> tuple:
    """The probes of ``func`` that some row applies to (real or complex operands)."""
    n = 1 if complex_ else _arity(func)
    if complex_:
        probes = [(complex(a, b),) for a in COMPLEX_PROBES for b in COMPLEX_PROBES]
    else:
        vals = REAL_PROBES + ((-math.nan,) if _signed_nan_rows(func) else ())
        probes = [(v,) for v in vals] if n == 1 else [(u, v) for u in vals for v in vals]
    out = []
    for p in probes:
        w = _wants(func, p, complex_)
        if w:
            out.append(Case(p, w))
    return tuple(out)


def _signed_nan_rows(func: str) -> bool:
    """Whether a row of ``func`` tells NaN inputs apart by sign bit (then NaN of both signs is probed)."""
    return any("NaN+" in c or "NaN-" in c for r in ROWS if r.func == func for c in r.conds)


def _arity(func: str) -> int:
    row = next((r for r in ROWS if r.func == func), None)
    if row is None:
        base = AS_IF[func]
        return base[1].__code__.co_argcount
    return 2 if row.names == ("x1", "x2") else 1


# --- comparing -------------------------------------------------------------------------------
def _ok(actual, e: Expect, rtol: float) -> bool:
    v = e.value
    if isinstance(v, bool):
        return bool(actual) == v
    a = float(actual)
    if math.isnan(v):
        return math.isnan(a) and (not e.nan_sign or math.copysign(1.0, a) == math.copysign(1.0, v))
    if math.isinf(v) or v == 0:
        same_sign = math.copysign(1.0, a) == math.copysign(1.0, v)
        return abs(a) == abs(v) and (same_sign or not e.signed)
    return math.isfinite(a) and abs(a - v) <= rtol * abs(v)


def _satisfies(actual, alts, rtol) -> bool:
    parts = (actual.real, actual.imag) if isinstance(actual, complex) else (actual,)
    for alt in alts:
        if len(alt) == 1 and isinstance(actual, complex):
            continue
        if len(alt) == len(parts) and all(_ok(p, e, rtol) for p, e in zip(parts, alt)):
            return True
    return False


def _fmt(v) -> str:
    if isinstance(v, complex):
        return f"{_fmt(v.real)} + {_fmt(v.imag)}j"
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if math.isnan(v):
        return "-NaN" if math.copysign(1.0, v) < 0 else "NaN"  # (copysign and signbit tell them apart)
    return Expect(float(v)).text() if (math.isinf(v) or v == 0) else f"{float(v):.6g}"


def _alt_text(alts) -> str:
    return " or ".join(", ".join(e.text() for e in alt) for alt in alts)


def check(func: str, device, dtype, rtol: float | None = None, call=None, label: str | None = None) -> list:
    """Run ``func``'s special cases at ``dtype`` on ``device``; one message per disagreement.

    ``rtol`` bounds the error of approximations the standard allows (π/2, cis(b)...); by default
    the dtype's forward tolerance. ``call(*tensors)`` computes the results instead of
    ``anydevice.<func>`` (an operator that the standard maps to ``func``, e.g. ``__add__``), named
    ``label`` in the messages."""
    import anydevice as ad
    from anydevice import dtypes as _dt

    from .tolerances import DEFAULT

    d = _dt.dtype(dtype)
    complex_ = d.kind == "complex"
    if rtol is None:
        rtol = DEFAULT[d.name][0]
    cs = cases(func, complex_)
    if not cs:
        return []
    cols = list(zip(*[c.args for c in cs]))
    tensors = [ad.asarray(np.asarray(col, dtype=d.numpy), device=device) for col in cols]
    device = tensors[0].device
    with np.errstate(all="ignore"):
        r = (call or getattr(ad, func))(*tensors)
        got = np.ascontiguousarray(r.numpy() if hasattr(r, "numpy") else r).reshape(-1)
    return [f"{label or func}({', '.join(_fmt(a) for a in cs[i].args)}) on {device} ({d.name}) = {_fmt(g)}; "
            f"the standard says {_alt_text(alts)} ({text})"
            for i, g, text, alts in _disagreements(func, complex_, rtol, got.dtype, got.tobytes())]


@functools.lru_cache(maxsize=4096)
def _disagreements(func: str, complex_: bool, rtol: float, dtype: np.dtype, raw: bytes) -> tuple:
    """(case index, result, row, alternatives) of the first row each result breaks. Cached on the
    result's bytes: devices that agree bit for bit are judged once."""
    got = np.frombuffer(raw, dtype)
    out = []
    for i, (c, g) in enumerate(zip(cases(func, complex_), got)):
        g = complex(g) if np.iscomplexobj(g) else (bool(g) if isinstance(g, np.bool_) else float(g))
        bad = next(((t, alts) for t, alts in c.wants if not _satisfies(g, alts, rtol)), None)
        if bad is not None:
            out.append((i, g, *bad))
    return tuple(out)
