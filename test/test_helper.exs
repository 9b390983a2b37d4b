exclude = [:slow]

exclude =
  if Tachyon.TestHelpers.can_mount_tmpfs?() do
    exclude
  else
    IO.puts("note: cannot mount a tmpfs here (not root?): tests tagged :tmpfs are excluded")
    [:tmpfs | exclude]
  end

ExUnit.start(exclude: exclude)
