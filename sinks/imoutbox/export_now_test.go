package imoutbox

import "time"

// SetNow sets r's clock (tests that pin the claim deadlines to the ms).
func SetNow(r *Repo, now func() time.Time) { r.now = now }

// SetBacklogCap sets how many rows r's Backlog reads per status.
func SetBacklogCap(r *Repo, n int) { r.backlogCap = n }
