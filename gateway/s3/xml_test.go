package s3

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"testing"
)

func versionPage(key string, n int) *listVersionsResult {
	own := owner{ID: "o<&>", DisplayName: "the 'owner'"}
	r := &listVersionsResult{Xmlns: s3NS, Name: "b", Prefix: key, KeyMarker: key, MaxKeys: n, IsTruncated: n%2 == 0,
		NextKeyMarker: key, NextVersionIDMarker: "null", Delimiter: "/", EncodingType: "url"}
	for i := range n {
		size := uint64(i)
		v := versionXML{XMLName: xml.Name{Local: "Version"}, Key: fmt.Sprintf("%s%d", key, i), VersionID: "000000000000000a",
			IsLatest: i == 0, LastModified: "2026-11-26T00:00:00.000Z", ETag: `"e"`, Size: &size, Owner: &own, StorageClass: "STANDARD"}
		if i%3 == 1 {
			v = versionXML{XMLName: xml.Name{Local: "DeleteMarker"}, Key: key, VersionID: "null", LastModified: "x", Owner: &own}
		}
		r.Versions = append(r.Versions, v)
	}
	if n > 1 {
		r.CommonPrefixes = []commonPrefix{{Prefix: key + "/"}, {Prefix: "p"}}
	}
	return r
}

// FuzzVersionListXML: the hand-written encoding of a version listing is
// byte for byte what encoding/xml writes, whatever the keys hold.
func FuzzVersionListXML(f *testing.F) {
	for _, k := range []string{"", "a", "a<b>&c\"d'e", "tab\there\nnl\rcr", "\x00\x01\xff", "日本語", "\uFFFD\U0010FFFF", "x]]>y"} {
		f.Add(k, 3)
	}
	f.Fuzz(func(t *testing.T, key string, n int) {
		n = max(0, n%6)
		r := versionPage(key, n)
		want, err := xml.Marshal(r)
		if err != nil {
			return
		}
		var got bytes.Buffer
		r.appendXML(&got)
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("key %q:\n got %s\nwant %s", key, got.Bytes(), want)
		}
	})
}

// BenchmarkVersionListXML: one page of a thousand versions, encoded.
func BenchmarkVersionListXML(b *testing.B) {
	r := versionPage("dir/key", 1000)
	b.Run("appendXML", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			r.appendXML(&buf)
		}
	})
	b.Run("xml.Marshal", func(b *testing.B) {
		for b.Loop() {
			xml.Marshal(r)
		}
	})
}
