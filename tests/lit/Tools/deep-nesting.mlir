// Input nested beyond what the parser's recursion can take is refused with a
// diagnostic at the first level too deep, never a crash.

// RUN: %python -c "print('module {' * 4000 + '}' * 4000)" | not tilejit-opt 2>&1 | FileCheck %s --check-prefix=MODULES
// MODULES: <stdin>:1:{{[0-9]+}}: error: nesting deeper than 512 levels of brackets, braces, parentheses and '<'; tilejit-opt does not parse it
// MODULES-NOT: Stack dump

// RUN: %python -c "n = 3000; print('func.func @f(%%n: index) {\n%%c0 = arith.constant 0 : index\n%%c1 = arith.constant 1 : index\n' + 'scf.for %%i = %%c0 to %%n step %%c1 {\n' * n + '}\n' * n + 'return\n}')" | not tilejit-opt 2>&1 | FileCheck %s --check-prefix=LOOPS
// LOOPS: <stdin>:{{[0-9]+}}:{{[0-9]+}}: error: nesting deeper than 512 levels

// Types nest too.
// RUN: %python -c "print('func.func private @f() -> ' + 'tuple<' * 3000 + 'i32' + '>' * 3000)" | not tilejit-opt 2>&1 | FileCheck %s --check-prefix=TYPES
// TYPES: error: nesting deeper than 512 levels

// Up to the limit, input parses as before.
// RUN: %python -c "print('module {' * 200 + '}' * 200)" | tilejit-opt | FileCheck %s --check-prefix=SHALLOW
// SHALLOW: module {
