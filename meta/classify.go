package meta

import (
	"path"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"cairn/proto/metapb"
)

// Which calls need mounts' cooperation is derived from the API itself,
// not listed by hand (a list missed S3Copy, S3CompleteUpload and
// S3SetTags, so an S3 copy over a file a mount had closed behind was
// overwritten by the mount's later commit):
//
//   - A call is recalled for (dirty mounts commit what they wrote behind
//     first, writebehind.go) when its request names a path in a
//     namespace: a field naming the namespace (ns, *_ns, bucket) beside
//     one naming a path in it (path, *_path, prefix, key, from, to), at
//     any depth; or names a whole namespace (NamespaceRequest: deleting
//     one refuses it while files are in it, queued ones included). The
//     session protocol itself (Mount* calls) is exempt: it is how mounts
//     announce and commit.
//   - A call's answer waits for every other mount session's
//     acknowledgement (session.go) when the call published change events:
//     the events are exactly what mounts cache by, so a call that changes
//     what a mount may hold cannot answer before the mounts dropped it.
//     (A call that published nothing but ran beside one that did waits
//     too: a superset, one loopback round trip to the mounts.)

// dataMethods holds, by bare method name, the calls that read or change
// namespace data (see above); computed once from the service descriptor.
var dataMethods = func() map[string]bool {
	m := map[string]bool{}
	ms := metapb.File_proto_meta_proto.Services().ByName("Meta").Methods()
	for i := 0; i < ms.Len(); i++ {
		md := ms.Get(i)
		name := string(md.Name())
		if md.IsStreamingClient() || md.IsStreamingServer() || strings.HasPrefix(name, "Mount") {
			continue
		}
		m[name] = namesTreeData(md.Input(), 0)
	}
	return m
}()

// namesTreeData reports whether a message of type d names a path in a
// namespace, or a whole namespace.
func namesTreeData(d protoreflect.MessageDescriptor, depth int) bool {
	if d.Name() == "NamespaceRequest" {
		return true
	}
	if depth > 4 {
		return false
	}
	var ns, p bool
	fs := d.Fields()
	for i := 0; i < fs.Len(); i++ {
		f := fs.Get(i)
		n := string(f.Name())
		switch {
		case f.Kind() == protoreflect.StringKind && (n == "ns" || n == "bucket" || strings.HasSuffix(n, "_ns")):
			ns = true
		case f.Kind() == protoreflect.StringKind && (n == "path" || n == "prefix" || n == "key" || n == "from" || n == "to" || strings.HasSuffix(n, "_path")):
			p = true
		case f.Kind() == protoreflect.MessageKind && !f.IsMap() && namesTreeData(f.Message(), depth+1):
			return true
		}
	}
	return ns && p
}

// DataMethod reports whether the call of full method name (or its bare
// name) reads or changes namespace data: dirty mounts are recalled before
// it is served, and a mount orders it after the mkdirs it answered.
func DataMethod(method string) bool { return dataMethods[path.Base(method)] }
