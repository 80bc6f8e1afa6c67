package cli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/proto/metapb"
)

func TestParseTierRule(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want *metapb.TierRule
		bad  string // a piece of the error
	}{
		{in: "to=cold", want: &metapb.TierRule{To: "cold"}},
		{in: "to=cold,unread=30d,min=1MiB,max=2GiB,prefix=logs/a,b", want: &metapb.TierRule{To: "cold",
			UnreadNs: int64(30 * 24 * time.Hour), MinSize: 1 << 20, MaxSize: 2 << 30, Prefix: "logs/a,b"}},
		{in: "unread=90m,to=ec-4+2", want: &metapb.TierRule{To: "ec-4+2", UnreadNs: int64(90 * time.Minute)}},
		{in: "", bad: "no to=CLASS"},
		{in: "unread=1h", bad: "no to=CLASS"},
		{in: "to=", bad: "empty class"},
		{in: "to=cold,unread=-1h", bad: "negative"},
		{in: "to=cold,unread=soon", bad: "unread"},
		{in: "to=cold,unread=-3d", bad: "unread"},
		{in: "to=cold,min=big", bad: "min"},
		{in: "to=cold,min=2MiB,max=1MiB", bad: "max below min"},
		{in: "to=cold,size=1", bad: "unknown key"},
		{in: "to=cold,,", bad: "not KEY=VALUE"},
	} {
		got, err := ParseTierRule(tc.in)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%q: got %v, %v; want an error with %q", tc.in, got, err, tc.bad)
			}
			continue
		}
		if err != nil || !proto.Equal(got, tc.want) {
			t.Errorf("%q: got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// FuzzParseTierRule: a rule that parses prints (FormatTierPolicy) as a
// flag that parses to the same rule.
func FuzzParseTierRule(f *testing.F) {
	for _, s := range []string{"to=cold", "to=cold,unread=30d,min=1MiB,max=2GiB,prefix=logs/", "prefix=a,to=b", "to=x,unread=1h30m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseTierRule(s)
		if err != nil {
			return
		}
		if strings.Contains(r.To, ",") {
			return // a class name has no comma (meta refuses it); the flag cannot carry one
		}
		line := FormatTierPolicy(&metapb.TierPolicy{Ns: "n", Rules: []*metapb.TierRule{r}})
		flag, ok := strings.CutPrefix(line, "n: --rule ")
		if !ok {
			t.Fatalf("%q formats as %q", s, line)
		}
		again, err := ParseTierRule(flag)
		if err != nil || !proto.Equal(again, r) {
			t.Fatalf("%q -> %v -> %q -> %v, %v", s, r, flag, again, err)
		}
	})
}
