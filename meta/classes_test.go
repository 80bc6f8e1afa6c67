package meta

import (
	"slices"
	"testing"

	"cairn/errors"
	"cairn/proto/metapb"
)

func TestParseClass(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Class
		bad  bool
	}{
		{in: "ec-4+2", want: Class{Name: "ec-4+2", K: 4, M: 2}},
		{in: "replicated", want: Class{Name: "replicated"}},
		{in: "cold=ec:8+4,media=hdd", want: Class{Name: "cold", K: 8, M: 4, Media: "hdd"}},
		{in: "cold=ec:4+2,rf=2", want: Class{Name: "cold", K: 4, M: 2, Replication: 2}},
		{in: "hot=replicated:2,media=ssd", want: Class{Name: "hot", Replication: 2, Media: "ssd"}},
		{in: "hot", bad: true},
		{in: "x=ec:0+2", bad: true},
		{in: "x=ec:60+10", bad: true},
		{in: "x=ec:4", bad: true},
		{in: "x=replicated:0", bad: true},
		{in: "x=raid5", bad: true},
		{in: "x=ec:4+2,colour=red", bad: true},
		{in: "x y=ec:4+2", bad: true},
		{in: "x=ec:4+2,media=", bad: true},
	} {
		got, err := ParseClass(c.in)
		if c.bad != (err != nil) || !c.bad && got != c.want {
			t.Errorf("ParseClass(%q) = %+v, %v; want %+v (bad %v)", c.in, got, err, c.want, c.bad)
		}
	}
	if err := validateClasses([]Class{{Name: "a"}, {Name: "a"}}); err == nil {
		t.Error("a class given twice was accepted")
	}
	if err := validateClasses([]Class{{Name: ClassReplicated, K: 4, M: 2}}); err == nil {
		t.Error("an erasure-coded \"replicated\" was accepted")
	}
}

func FuzzParseClass(f *testing.F) {
	for _, s := range []string{"ec-4+2", "cold=ec:8+4,media=hdd,rf=2", "hot=replicated:3", "x=ec:+"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseClass(s)
		if err != nil {
			return
		}
		if !validClassName(c.Name) || c.K < 0 || c.M < 0 || c.K+c.M > 64 || (c.K == 0) != (c.M == 0) || c.Replication > 16 {
			t.Fatalf("ParseClass(%q) accepted %+v", s, c)
		}
	})
}

// TestNamespaceClass: a namespace takes a known class and refuses an
// unknown one; Assign places an ec class's volumes only on servers of its
// media and records the class on them, apart from replicated volumes.
func TestNamespaceClass(t *testing.T) {
	c := newCluster()
	cfg := testConfig(t.TempDir(), c)
	cfg.Classes = []Class{{Name: "cold", K: 4, M: 2, Media: "hdd"}}
	svc, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, svc)
	for _, id := range []string{"s1", "s2", "s3"} {
		media := "hdd"
		if id == "s3" {
			media = "ssd"
		}
		if _, err := ts.cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: id, Addr: id + ":1", Free: 100, Labels: map[string]string{"media": media}}); err != nil {
			t.Fatal(err)
		}
	}
	ns, err := ts.cl.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "cold", Owner: "o", StorageClass: "cold", Replication: 2})
	if err != nil || ns.StorageClass != "cold" {
		t.Fatalf("create: %v %+v", err, ns)
	}
	_, err = ts.cl.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "bad", Owner: "o", StorageClass: "tape"})
	wantKind(t, err, errors.Invalid)
	mkns(t, ts.cl, "warm")
	a, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "cold"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Volume.StorageClass != "cold" || slices.Contains(a.Volume.ServerIds, "s3") || len(a.Volume.ServerIds) != 2 {
		t.Fatalf("cold volume %+v: want class cold on s1 and s2 (media hdd)", a.Volume)
	}
	w, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "warm"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Volume.Id == a.Volume.Id || w.Volume.StorageClass != "" {
		t.Fatalf("replicated namespace got volume %+v", w.Volume)
	}
	// A write of another class (S3's x-amz-storage-class) gets its own volume.
	e, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "warm", StorageClass: "ec-2+1"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Volume.StorageClass != "ec-2+1" || e.Volume.Id == w.Volume.Id {
		t.Fatalf("ec-2+1 write got volume %+v", e.Volume)
	}
}
