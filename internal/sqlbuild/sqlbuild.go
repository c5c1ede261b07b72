// Package sqlbuild writes the placeholder lists of roomflow's multi-row
// and IN (...) statements, the one home for what the MySQL writers
// (imoutbox, the draw service, the lucky outbox) would each spell out.
// Values always travel as arguments, never in the SQL text.
package sqlbuild

import "strings"

// List is n placeholders separated by commas: "?,?,?" (for IN (...)).
func List(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

// Rows is rows groups of cols placeholders: "(?,?),(?,?)" (for VALUES).
func Rows(rows, cols int) string {
	return strings.TrimSuffix(strings.Repeat("("+List(cols)+"),", rows), ",")
}

// Flatten is the arguments of rows, row after row, for Rows.
func Flatten(rows [][]any) []any {
	var out []any
	for _, r := range rows {
		out = append(out, r...)
	}
	return out
}

// Args converts vs to statement arguments.
func Args[T any](vs []T) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}
