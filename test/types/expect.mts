// Type assertions checked by tsc (test/types.test.js): they fail to compile
// when a type is wrong, not only when it is missing.

/** true when A and B are the same type; `any` equals nothing but `any`. */
export type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false

/**
 * Compiles only when `value`'s type is exactly `Expected`:
 * `expectType<number>()(count)`. Assignable is not enough.
 */
export function expectType<Expected> () {
  return function check<Actual> (value: Actual, ..._exact: Equal<Expected, Actual> extends true ? [] : ['the type differs from the expected one']): void {
    void value
  }
}
