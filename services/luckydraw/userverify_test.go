package luckydraw_test

// userVerify is the user's verification procedure of docs/fairness.md,
// step by step, over the public HTTP routes and with the standard library
// only: no roomflow package is imported by this file.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
)

// getJSON GETs url with the gateway's headers (user "" for the public
// routes) into v.
func getJSON(url, user, app string, v any) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-App-Code", app)
	if user != "" {
		req.Header.Set("X-User-Id", user)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Step 1, before the day starts: the day's commitment.
func userCommitment(base, app, day string) (string, error) {
	var c struct {
		Mode       string `json:"mode"`
		Commitment string `json:"commitment"`
	}
	if err := getJSON(base+"/api/v1/lucky/fairness/"+day+"/commitment", "", app, &c); err != nil {
		return "", err
	}
	if c.Mode != "commit_reveal" || len(c.Commitment) != 64 {
		return "", fmt.Errorf("day %s is not committed: %+v", day, c)
	}
	return c.Commitment, nil
}

// userVerify runs steps 3-8 for the user's draws of the day, given the
// commitment saved in step 1; it returns the number of draws verified.
func userVerify(base, app, user, day, commitment string, drawIDs []string) (int, error) {
	// Step 4, after the reveal: the seed, and step 5: it is the committed one.
	var s struct {
		Seed string `json:"seed"`
	}
	if err := getJSON(base+"/api/v1/lucky/fairness/"+day+"/seed", "", app, &s); err != nil {
		return 0, err
	}
	seed, err := hex.DecodeString(s.Seed)
	if h := sha256.Sum256(seed); err != nil || hex.EncodeToString(h[:]) != commitment {
		return 0, fmt.Errorf("the revealed seed does not match the commitment")
	}
	var nonces []int64
	for _, id := range drawIDs {
		// Step 3: my draw.
		var d struct {
			FairnessMode   string `json:"fairness_mode"`
			Nonce          int64  `json:"nonce"`
			ClientSeed     string `json:"client_seed"`
			RandomValue    int64  `json:"random_value"`
			SelectedTierID string `json:"selected_tier_id"`
			CandidateTable []struct {
				TierID         string `json:"tier_id"`
				ProbabilityPPM int64  `json:"probability_ppm"`
			} `json:"candidate_table"`
		}
		if err := getJSON(base+"/api/v1/users/me/lucky-draws/"+id, user, app, &d); err != nil {
			return 0, err
		}
		var userID int64
		fmt.Sscan(user, &userID)
		// Step 6: the random value.
		mac := hmac.New(sha256.New, seed)
		var value int64 = -1
		for counter := uint32(0); value < 0; counter++ {
			var msg bytes.Buffer
			binary.Write(&msg, binary.BigEndian, uint16(len(app)))
			msg.WriteString(app)
			binary.Write(&msg, binary.BigEndian, uint16(len(d.ClientSeed)))
			msg.WriteString(d.ClientSeed)
			binary.Write(&msg, binary.BigEndian, userID)
			binary.Write(&msg, binary.BigEndian, d.Nonce)
			binary.Write(&msg, binary.BigEndian, counter)
			mac.Reset()
			mac.Write(msg.Bytes())
			if v := binary.BigEndian.Uint32(mac.Sum(nil)[:4]); v < 4_294_000_000 {
				value = int64(v % 1_000_000)
			}
		}
		// Step 7: the stored value and the tier it selects.
		if d.FairnessMode != "commit_reveal" || value != d.RandomValue {
			return 0, fmt.Errorf("draw %s: value %d, recomputed %d (mode %s)", id, d.RandomValue, value, d.FairnessMode)
		}
		var cum int64
		tier := ""
		for _, c := range d.CandidateTable {
			cum += c.ProbabilityPPM
			if tier == "" && cum > value {
				tier = c.TierID
			}
		}
		if tier != d.SelectedTierID {
			return 0, fmt.Errorf("draw %s: tier %s, the table selects %s", id, d.SelectedTierID, tier)
		}
		nonces = append(nonces, d.Nonce)
	}
	// Step 8: my nonces of the day run 1, 2, … without gaps.
	sort.Slice(nonces, func(i, j int) bool { return nonces[i] < nonces[j] })
	for i, n := range nonces {
		if n != int64(i+1) {
			return 0, fmt.Errorf("nonces %v have a gap", nonces)
		}
	}
	return len(drawIDs), nil
}
