//! A call's fingerprint tells every two different calls apart, however their text is cut
//! between fields, and ignores only the ids.

use runplane::domain::ToolCallRequest;

fn call(edit: impl FnOnce(&mut ToolCallRequest)) -> ToolCallRequest {
    let mut request = ToolCallRequest {
        run_id: "r".into(),
        call_id: "c".into(),
        tool: "Bash".into(),
        ..ToolCallRequest::default()
    };
    edit(&mut request);
    request
}

#[test]
fn text_moved_between_fields_is_another_call() {
    let pairs = [
        (
            call(|c| c.command = "ab".into()),
            call(|c| {
                c.command = "a".into();
                c.path = "b".into();
            }),
        ),
        (
            call(|c| c.paths = vec!["a".into(), "b".into()]),
            call(|c| c.paths = vec!["ab".into()]),
        ),
        (
            call(|c| c.paths = vec![String::new()]),
            call(|c| c.paths = Vec::new()),
        ),
        (
            call(|c| c.input = "{}".into()),
            call(|c| c.url = "{}".into()),
        ),
        (
            call(|c| c.resolved_path = "/x".into()),
            call(|c| c.path = "/x".into()),
        ),
        (call(|c| c.tool = "Read".into()), call(|_| {})),
    ];
    for (a, b) in pairs {
        assert_ne!(a.fingerprint(), b.fingerprint(), "{a:?} / {b:?}");
    }
}

#[test]
fn the_ids_are_not_part_of_it() {
    let a = call(|c| c.command = "git status".into());
    let b = call(|c| {
        c.command = "git status".into();
        c.run_id = "other".into();
        c.call_id = "other".into();
    });
    assert_eq!(a.fingerprint(), b.fingerprint());
}
