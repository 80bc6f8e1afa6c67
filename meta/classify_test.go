package meta

import (
	"testing"

	"google.golang.org/grpc/metadata"

	"cairn/proto/metapb"
)

// TestMethodClassification walks every method of the Meta service and
// checks the derived answer to "does it read or change namespace data a
// mount may hold behind?". A method added to the API must be added here:
// the test fails for any method it does not know.
func TestMethodClassification(t *testing.T) {
	data := map[string]bool{
		"Resolve": true, "BatchResolve": true, "List": true, "Mkdir": true, "Commit": true, "CommitBatch": true,
		"Append": true, "Delete": true, "Rename": true, "SetAttr": true, "Symlink": true, "Link": true, "SetXattr": true, "Mknod": true,
		"DeleteNamespace": true, "GetNamespace": true, "S3GetBucketConfig": true,
		"S3Copy": true, "S3SetTags": true, "S3CompleteUpload": true,
		// Uploads name a key but change no file before completion: recalled
		// for nothing, a superset the rule accepts.
		"S3CreateUpload": true, "S3GetUpload": true, "S3PutPart": true, "S3AbortUpload": true, "S3ListParts": true, "S3ListUploads": true,
		// Versions name a key (ListVersions a prefix); setting a bucket's
		// versioning names no file.
		"S3GetVersion": true, "S3DeleteVersion": true, "S3Delete": true, "S3ListVersions": true, "S3SetLock": true,
		"S3SetVersioning": false,

		"CreateNamespace": false, "ListNamespaces": false, "SetVisibility": false,
		"Assign": false, "Volumes": false, "Heartbeat": false, "Authenticate": false, "CreateUser": false, "Info": false, "SecretsRevocations": false,
		"ClusterStatus": false, "ClusterDrain": false, "ClusterRebalance": false,
		"S3CreateUser": false, "S3DeleteUser": false, "S3ListUsers": false, "S3CreateKey": false, "S3DeleteKey": false,
		"S3ListKeys": false, "S3Grant": false, "S3GetSecret": false, "S3PutBucketConfig": false,
		"Sync": false, "MountDirty": false, "MountReserve": false, "MountAccess": false, "RenewCaps": false, "MountLock": false,
		"CreateJoinToken": false, "Join": false, "RevokeCert": false,
		"TierSetPolicy": false, "TierGetPolicy": false, "TierStatus": false, "TierNoteReads": false,
		"MetaMembers": false, "MetaAddMember": false, "MetaRemoveMember": false, "MetaSnapshot": false, "MetaReadIndex": false,
		// Streams are not served through serve().
		"Watch": false, "MountSession": false,
	}
	ms := metapb.File_proto_meta_proto.Services().ByName("Meta").Methods()
	for i := 0; i < ms.Len(); i++ {
		name := string(ms.Get(i).Name())
		want, ok := data[name]
		if !ok {
			t.Errorf("method %s is not classified in this test: does it read or change namespace data?", name)
			continue
		}
		if got := DataMethod("/cairn.Meta/" + name); got != want {
			t.Errorf("%s: recalled for %v, want %v", name, got, want)
		}
	}
}

// TestS3CallsCoherentWithMounts: S3Copy over a file a mount closed behind
// recalls the mount first (its commit lands before the copy, which then
// wins), and S3SetTags, S3Copy and S3CompleteUpload answer only once
// every mount dropped what they changed (issue: both were missing from
// hand-kept lists).
func TestS3CallsCoherentWithMounts(t *testing.T) {
	ts := start(t, newCluster())
	mkns(t, ts.cl, "data")
	a := openSession(t, ts, "mount-a")
	done := async(func() error {
		put(t, ts.cl, "data", "src", 10, 1)
		put(t, ts.cl, "data", "dst", 10, 2)
		return nil
	})
	for range 2 {
		a.Send(&metapb.MountSessionMsg{Ack: nextEvent(t, a).Seq})
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A closed dst behind: dirty.
	fromA := metadata.AppendToOutgoingContext(bg, SessionHeader, "mount-a")
	if _, err := ts.cl.MountDirty(fromA, &metapb.MountDirtyRequest{Session: "mount-a", Epoch: 1, Ns: "data", Path: "dst"}); err != nil {
		t.Fatal(err)
	}
	copied := async(func() error {
		_, err := ts.cl.S3Copy(bg, &metapb.S3CopyRequest{SrcNs: "data", SrcPath: "src", DstNs: "data", DstPath: "dst"})
		return err
	})
	if ev := nextEvent(t, a); !ev.MountFlush {
		t.Fatalf("A got %v, want a flush request before the copy", ev)
	}
	notYet(t, copied, "S3Copy")
	a.Send(&metapb.MountSessionMsg{Clean: 1})
	// The copy's event: not answered before A dropped dst.
	ev := nextEvent(t, a)
	if ev.Path != "dst" {
		t.Fatalf("A got %v, want the copy's event", ev)
	}
	notYet(t, copied, "S3Copy")
	a.Send(&metapb.MountSessionMsg{Ack: ev.Seq})
	if err := <-copied; err != nil {
		t.Fatal(err)
	}

	tagged := async(func() error {
		_, err := ts.cl.S3SetTags(bg, &metapb.S3TagsRequest{Ns: "data", Path: "dst", Tags: map[string]string{"k": "v"}})
		return err
	})
	ev = nextEvent(t, a)
	if ev.Path != "dst" {
		t.Fatalf("A got %v, want the tags' event", ev)
	}
	notYet(t, tagged, "S3SetTags")
	a.Send(&metapb.MountSessionMsg{Ack: ev.Seq})
	if err := <-tagged; err != nil {
		t.Fatal(err)
	}
}

// TestCommandMethods: the calls whose answers wait for the mounts are the
// commands, derived from metapb.Command; reads never wait.
func TestCommandMethods(t *testing.T) {
	for _, m := range []string{"Mkdir", "Commit", "CommitBatch", "Append", "Delete", "Rename", "SetAttr", "Symlink", "Link", "SetXattr",
		"CreateNamespace", "DeleteNamespace", "SetVisibility", "S3Copy", "S3SetTags", "S3CompleteUpload"} {
		if !commandMethods[m] {
			t.Errorf("%s is not a command: its answer would not wait for the mounts", m)
		}
	}
	for _, m := range []string{"Resolve", "BatchResolve", "List", "ListNamespaces", "MountDirty", "MountLock", "Info"} {
		if commandMethods[m] {
			t.Errorf("%s is a command: reads must not wait for the mounts", m)
		}
	}
}
