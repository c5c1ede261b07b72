package mysqlsink

// SetChunk caps the rows of one multi-row statement of s (tests: several
// chunks without thousands of rows).
func SetChunk(s *Store, n int) { s.chunk = n }
